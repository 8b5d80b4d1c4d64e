// examples/vercel-ai/main.mjs runs as shipped against a live server. It is run
// from a copy inside this package, where `zerolock`, `ai` and `zod` resolve
// (the example's own package.json installs the same three).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { REPO, startServer } from "./helpers/server.mjs";

const run = promisify(execFile);
const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const work = join(pkg, ".example-run");

/** @type {Awaited<ReturnType<typeof startServer>>} */
let server;

before(async () => {
  server = await startServer({ admin: "--permissions admin" });
  mkdirSync(work, { recursive: true });
});
after(async () => {
  rmSync(work, { recursive: true, force: true });
  await server?.stop();
});

test("the Vercel AI SDK example drains its queue with every task recorded once", async () => {
  const file = join(work, "main.mjs");
  copyFileSync(join(REPO, "examples", "vercel-ai", "main.mjs"), file);
  const env = { ...process.env, ZEROLOCK_URL: server.url, ZEROLOCK_API_KEY: server.keys.admin };
  const { stdout } = await run(process.execPath, [file], { cwd: pkg, env, timeout: 120_000 });
  assert.match(stdout, /summary: 9 lines for 9 tasks, 9 distinct/);
  assert.equal(stdout.match(/no work left/g)?.length, 3);
});
