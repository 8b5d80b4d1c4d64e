// The core runs where only fetch and WebSocket exist (browsers, edge runtimes):
// the built files import nothing but each other, and only zerolock/ai loads ai and zod.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import vm from "node:vm";

const dist = join(resolve(dirname(fileURLToPath(import.meta.url)), ".."), "dist");
const imports = (/** @type {string} */ file) =>
  [...readFileSync(join(dist, file), "utf8").matchAll(/^(?:import|export)\s[^;]*?from\s+["']([^"']+)["']/gm)].map((m) => m[1]);

test("the core's built modules import only each other: no node: modules, no packages", () => {
  const core = readdirSync(dist).filter((f) => f.endsWith(".js") && f !== "ai.js");
  assert.ok(core.includes("index.js") && core.includes("client.js"));
  for (const file of core) {
    for (const specifier of imports(file)) assert.match(specifier ?? "", /^\.\/[\w.-]+\.js$/, `${file} imports ${specifier}`);
    assert.doesNotMatch(readFileSync(join(dist, file), "utf8"), /\brequire\(|\bprocess\.env\b(?!\?)/, file);
  }
  assert.deepEqual(imports("ai.js").filter((s) => !s?.startsWith("./")).sort(), ["ai", "zod"]);
});

test("a client builds and sends in a context with web globals only (fetch, AbortSignal, URL), no process", async () => {
  /** @type {string[]} */
  const seen = [];
  // Only web-platform globals (what browsers and edge runtimes have), no Node ones.
  const context = vm.createContext({
    AbortSignal,
    URL,
    URLSearchParams,
    setTimeout,
    clearTimeout,
    TextDecoder,
    fetch: async (/** @type {string} */ url) => {
      seen.push(url);
      return new Response(JSON.stringify({ status: "ok" }), { status: 200 });
    },
  });
  // The core's modules, linked inside that context (as a bundler would ship them).
  // (node --experimental-vm-modules, which `npm test` passes.)
  const modules = new Map();
  const get = (/** @type {string} */ file) => {
    if (!modules.has(file)) {
      const source = readFileSync(join(dist, file), "utf8");
      modules.set(file, new vm.SourceTextModule(source, { context, identifier: file }));
    }
    return modules.get(file);
  };
  const index = get("index.js");
  await index.link((/** @type {string} */ specifier) => get(specifier.replace(/^\.\//, "")));
  await index.evaluate();
  const { ZeroLockClient } = index.namespace;
  const client = new ZeroLockClient("http://zerolock.example", { apiKey: "zl_x.y", agentId: "edge" });
  assert.equal(JSON.stringify(await client.health()), '{"status":"ok"}'); // another realm's object
  assert.deepEqual(seen, ["http://zerolock.example/api/health"]);
});
