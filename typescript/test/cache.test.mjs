// The cached client against a live server: invalidation pushed over /ws/agents/,
// setOnConflict, the TTL without a socket.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import WebSocket from "ws";
import { CachedZeroLockClient, ConflictError, StaleCommitError, ZeroLockClient } from "../dist/index.js";
import { startServer } from "./helpers/server.mjs";

/** @type {Awaited<ReturnType<typeof startServer>>} */
let server;
/** @type {ZeroLockClient} */
let writer;
/** @type {CachedZeroLockClient[]} */
const opened = [];

const cached = (/** @type {string} */ agentId, /** @type {object} */ extra = {}) => {
  const client = new CachedZeroLockClient(server.url, { apiKey: server.keys.admin, agentId, WebSocket, ...extra });
  opened.push(client);
  return client;
};

/** Polls `check` until it holds (pushes arrive asynchronously), failing after 5 s. */
async function eventually(/** @type {() => boolean} */ check, /** @type {string} */ what) {
  const deadline = Date.now() + 5_000;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`not within 5 s: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

before(async () => {
  server = await startServer({ admin: "--permissions admin" });
  writer = new ZeroLockClient(server.url, { apiKey: server.keys.admin, agentId: "writer" });
  await writer.createShard("plan", { initialValue: { step: 1 } });
});
after(async () => {
  for (const client of opened) client.close();
  await server?.stop();
});

test("a second read of an unchanged shard is served from memory, with no request", async () => {
  const reader = cached("reader-1");
  await reader.getShard("plan");
  const sent = reader.requestsSent;
  const again = await reader.getShard("plan");
  assert.deepEqual(again.value, { step: 1 });
  assert.equal(reader.requestsSent, sent);
  assert.equal(reader.cacheHits, 1);
  assert.equal(reader.socketOpen, true, "autoConnectWs opened the socket on the first read");
});

test("another agent's commit is pushed as an invalidate, and the next read fetches the new value", async () => {
  const reader = cached("reader-2");
  const first = await reader.getShard("plan");
  await writer.commitShard("plan", { step: 2 }, first.version);
  await eventually(() => !reader.isFresh("plan"), "the invalidate reached the cache");
  const sent = reader.requestsSent;
  const fresh = await reader.getShard("plan");
  assert.deepEqual(fresh.value, { step: 2 });
  assert.equal(reader.requestsSent, sent + 1);
});

test("the client's own commit refreshes its entry without a round trip", async () => {
  const reader = cached("reader-3");
  const shard = await reader.getShard("plan");
  await reader.commitShard("plan", { step: 3 }, shard.version);
  const sent = reader.requestsSent;
  assert.deepEqual((await reader.getShard("plan")).value, { step: 3 });
  assert.equal(reader.requestsSent, sent);
});

test("setOnConflict gets the shard, the winning version and value, the rejected value and the diff", async () => {
  const loser = cached("loser");
  /** @type {unknown[][]} */
  const calls = [];
  loser.setOnConflict((shardId, version, winning, rejected, diff) => {
    calls.push([shardId, version, winning, rejected, diff]);
  });
  const seen = await loser.getShard("plan");
  await writer.commitShard("plan", { step: 4 }, seen.version);
  // The loser has not heard yet: within its cache the old version still looks current.
  const error = await loser.commitShard("plan", { step: 99 }, seen.version).catch((e) => e);
  assert.ok(error instanceof StaleCommitError);
  await eventually(() => calls.length === 1, "conflict_notify reached onConflict");
  const [shardId, version, winning, rejected, diff] = calls[0] ?? [];
  assert.equal(shardId, "plan");
  assert.equal(version, (seen.version) + 1);
  assert.deepEqual(winning, { step: 4 });
  assert.deepEqual(rejected, { step: 99 });
  assert.deepEqual(diff, [{ op: "replace", path: "/step", value: 99 }]);
  assert.equal(loser.isFresh("plan"), false);
});

test("a callback that resolves the conflict can commit the merge on the winning version", async () => {
  const agent = cached("merger");
  /** @type {Promise<unknown> | undefined} */
  let merged;
  agent.setOnConflict((shardId, version, winning, rejected) => {
    merged = agent.commitShard(shardId, { .../** @type {object} */ (winning), ...(/** @type {object} */ (rejected)) }, /** @type {number} */ (version));
  });
  const seen = await agent.getShard("plan");
  await writer.commitShard("plan", { step: 5 }, seen.version);
  await assert.rejects(agent.commitShard("plan", { step: 5, note: "mine" }, seen.version), StaleCommitError);
  await eventually(() => merged !== undefined, "onConflict ran");
  await merged;
  assert.deepEqual((await writer.getShard("plan")).value, { step: 5, note: "mine" });
});

test("without a socket the cache serves reads only within ttlMs", async () => {
  const offline = cached("offline", { autoConnectWs: false, ttlMs: 300 });
  await offline.getShard("plan");
  await offline.getShard("plan");
  assert.equal(offline.cacheHits, 1);
  assert.equal(offline.socketOpen, false);
  await new Promise((r) => setTimeout(r, 350));
  const sent = offline.requestsSent;
  await offline.getShard("plan");
  assert.equal(offline.requestsSent, sent + 1, "past its TTL the entry was read again");
});

test("without a socket and without ttlMs nothing is cached", async () => {
  const plain = cached("plain", { autoConnectWs: false });
  await plain.getShard("plan");
  await plain.getShard("plan");
  assert.equal(plain.cacheHits, 0);
});

test("connectWs() opens the socket explicitly, and the cache then follows pushes", async () => {
  const manual = cached("manual", { autoConnectWs: false });
  await manual.connectWs();
  assert.equal(manual.socketOpen, true);
  const seen = await manual.getShard("plan");
  assert.equal(manual.isFresh("plan"), true);
  await writer.commitShard("plan", { step: 6 }, seen.version);
  await eventually(() => !manual.isFresh("plan"), "the invalidate reached the cache");
});

test("an additive write of the client's own marks its entry stale (the server pushes none to the writer)", async () => {
  await writer.createShard("log", { type: "additive", crdtType: "array" });
  const agent = cached("appender");
  await agent.getShard("log");
  await agent.append("log", ["x"]);
  assert.equal(agent.isFresh("log"), false);
  assert.deepEqual((await agent.getShard("log")).value, ["x"]);
});

test("a session lease needs the agent's socket open: refused NO_SESSION without it, granted with it", async () => {
  const agent = cached("session-holder", { autoConnectWs: false });
  const refused = await agent.grantLease(5, { session: true }).catch((e) => e);
  assert.ok(refused instanceof ConflictError, String(refused));
  assert.equal(refused.code, "NO_SESSION");
  await agent.connectWs();
  const lease = await agent.grantLease(5, { session: true });
  assert.equal(lease.session, true);
  assert.equal(lease.holder, "session-holder");
});

test("after the socket drops and reopens, every entry is read again and its shard resubscribed", async () => {
  const agent = cached("survivor");
  const seen = await agent.getShard("plan");
  assert.equal(agent.isFresh("plan"), true);
  await server.restart(); // the socket closes with the server
  const deadline = Date.now() + 20_000;
  while (!agent.socketOpen || agent.isFresh("plan")) {
    // Fresh while closed would be wrong too: without a socket and a TTL nothing is served.
    if (Date.now() > deadline) assert.fail("the socket did not reopen within 20 s");
    await new Promise((r) => setTimeout(r, 50));
  }
  const reread = await agent.getShard("plan");
  assert.equal(reread.version, seen.version);
  await writer.commitShard("plan", { step: 7 }, reread.version);
  await eventually(() => !agent.isFresh("plan"), "an invalidate arrived on the reopened socket");
});
