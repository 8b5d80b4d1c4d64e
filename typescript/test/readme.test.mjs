// The README's examples run as printed: each ```ts block, in order, type-stripped
// by TypeScript's own transpiler (nothing else changes), run by node inside this
// package (so `import ... from "zerolock"` resolves to dist/) against a live server.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import ts from "typescript";
import { startServer } from "./helpers/server.mjs";

const run = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, "..");
const work = join(pkg, ".readme-run");
const blocks = [...readFileSync(join(pkg, "README.md"), "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] ?? "");

/** @type {Awaited<ReturnType<typeof startServer>>} */
let server;

const squash = (/** @type {string} */ text) => text.replace(/\s+/g, " ").trim();

/** What the block says it prints: its `// prints ...` comments, in order. */
function expectedOutput(/** @type {string} */ source) {
  return [...source.matchAll(/\/\/ prints (.*)$/gm)].map((m) => m[1]).join("\n");
}

before(async () => {
  server = await startServer({ admin: "--permissions admin", officer: "--permissions approval:*,shard:read" });
  mkdirSync(work, { recursive: true });
});
after(async () => {
  rmSync(work, { recursive: true, force: true });
  await server?.stop();
});

test("the README has examples to run", () => {
  assert.ok(blocks.length >= 8, `found ${blocks.length} ts blocks`);
});

test("the README's examples type-check against the SDK's declarations", () => {
  const files = blocks.map((source, i) => {
    const file = join(work, `typed-${i + 1}.mts`);
    writeFileSync(file, `${source}\nexport {};\n`);
    return file;
  });
  const program = ts.createProgram(files, {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: ["node"],
  });
  const problems = ts.getPreEmitDiagnostics(program).map((d) => {
    const where = d.file ? `${d.file.fileName.split("/").at(-1)}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}` : "";
    return `${where} ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`;
  });
  assert.deepEqual(problems, []);
});

blocks.forEach((source, i) => {
  const firstLine = source.split("\n").find((l) => l.trim() && !l.startsWith("import")) ?? "";
  test(`README example ${i + 1} runs as printed: ${firstLine.trim().slice(0, 60)}`, async () => {
    const { outputText } = ts.transpileModule(source, {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    });
    const file = join(work, `example-${i + 1}.mjs`);
    writeFileSync(file, outputText);
    const env = {
      ...process.env,
      ZEROLOCK_URL: server.url,
      ZEROLOCK_API_KEY: server.keys.admin,
      ZEROLOCK_OFFICER_KEY: server.keys.officer,
    };
    try {
      const { stdout } = await run(process.execPath, [file], { cwd: pkg, env, timeout: 60_000 });
      // What the README says the block prints is what it printed, whitespace aside.
      assert.equal(squash(stdout), squash(expectedOutput(source)), `example ${i + 1}'s output`);
    } catch (error) {
      if (error instanceof assert.AssertionError) throw error;
      const e = /** @type {{stdout?: string, stderr?: string}} */ (error);
      assert.fail(`example ${i + 1} failed:\n${source}\n--- stdout ---\n${e.stdout}\n--- stderr ---\n${e.stderr}`);
    }
  });
});
