// Exactly-once claiming under contention, counted: 50 concurrent claimNext
// callers (each its own client and agent) drain a queue of 100 tasks.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ZeroLockClient } from "../dist/index.js";
import { startServer } from "./helpers/server.mjs";

/** @type {Awaited<ReturnType<typeof startServer>>} */
let server;

before(async () => {
  server = await startServer({ admin: "--permissions admin" });
});
after(async () => server?.stop());

test("50 concurrent claimNext callers claim 100 tasks exactly once: none twice, none lost", async () => {
  const TASKS = 100;
  const WORKERS = 50;
  const admin = new ZeroLockClient(server.url, { apiKey: server.keys.admin, agentId: "admin" });
  /** @type {Record<string, {status: string}>} */
  const queue = {};
  for (let i = 0; i < TASKS; i++) queue[`t${String(i).padStart(3, "0")}`] = { status: "pending" };
  await admin.createShard("swarm", { initialValue: queue });

  /** @type {Map<string, string[]>} task id -> the agents told they won it */
  const wins = new Map();
  const started = performance.now();
  const workers = Array.from({ length: WORKERS }, async (_, n) => {
    const agentId = `worker-${n}`;
    const client = new ZeroLockClient(server.url, { apiKey: server.keys.admin, agentId });
    for (;;) {
      const claimed = await client.claimNext("swarm");
      if (claimed === null) return;
      assert.equal(claimed.holder, agentId);
      wins.set(claimed.taskId, [...(wins.get(claimed.taskId) ?? []), agentId]);
    }
  });
  await Promise.all(workers);
  const seconds = (performance.now() - started) / 1000;

  const twice = [...wins].filter(([, agents]) => agents.length > 1);
  const lost = Object.keys(queue).filter((id) => !wins.has(id));
  assert.deepEqual(twice, [], "no task was claimed twice");
  assert.deepEqual(lost, [], "no task was lost");
  assert.equal(wins.size, TASKS);

  // The server's record agrees with what the callers were told.
  const final = /** @type {Record<string, {status: string, holder: string}>} */ ((await admin.getShard("swarm")).value);
  for (const [id, agents] of wins) {
    assert.equal(final[id]?.status, "claimed");
    assert.equal(final[id]?.holder, agents[0]);
  }
  console.log(`# ${TASKS} tasks, ${WORKERS} claimants: ${seconds.toFixed(2)} s, ${(TASKS / seconds).toFixed(0)} claims/s`);
});

test("50 concurrent claimTask callers racing for the same 10 tasks: each task has exactly one winner", async () => {
  const admin = new ZeroLockClient(server.url, { apiKey: server.keys.admin, agentId: "admin" });
  /** @type {Record<string, {status: string}>} */
  const queue = {};
  for (let i = 0; i < 10; i++) queue[`r${i}`] = { status: "pending" };
  await admin.createShard("race", { initialValue: queue });
  const results = await Promise.all(
    Array.from({ length: 50 }, async (_, n) => {
      const client = new ZeroLockClient(server.url, { apiKey: server.keys.admin, agentId: `racer-${n}` });
      const id = `r${n % 10}`;
      return { id, agent: `racer-${n}`, result: await client.claimTask("race", id) };
    }),
  );
  const final = /** @type {Record<string, {holder: string}>} */ ((await admin.getShard("race")).value);
  for (const id of Object.keys(queue)) {
    const winners = results.filter((r) => r.id === id && r.result.claimed);
    assert.equal(winners.length, 1, `${id} has one winner`);
    assert.equal(final[id]?.holder, winners[0]?.agent);
    // Every loser was told who holds it.
    for (const r of results.filter((r) => r.id === id && !r.result.claimed)) {
      assert.equal(r.result.holder, winners[0]?.agent);
    }
  }
});
