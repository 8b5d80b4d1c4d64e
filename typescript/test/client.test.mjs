// Every ZeroLockClient method and every error class, against a live server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import {
  ApprovalClient,
  ApprovalInvalidError,
  AuthenticationError,
  ConflictError,
  FencedError,
  FileLock,
  IrreversibleShardError,
  LockTimeoutError,
  MissingApiKeyError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitedError,
  ReadSetStaleError,
  ReservationConflictError,
  SchemaViolationError,
  SelfApprovalError,
  StaleCommitError,
  ValidationError,
  ZeroLockClient,
  ZeroLockError,
} from "../dist/index.js";
import { startServer } from "./helpers/server.mjs";

/** @type {Awaited<ReturnType<typeof startServer>>} */
let server;
/** @type {ZeroLockClient} */
let zl;
const options = (/** @type {string} */ key, /** @type {string} */ agentId) => ({ apiKey: key, agentId, WebSocket });

before(async () => {
  server = await startServer({
    admin: "--permissions admin",
    officer: "--permissions approval:*,shard:read",
    reader: "--permissions shard:read",
    slow: "--permissions shard:read --rate-limit 1",
  });
  zl = new ZeroLockClient(server.url, options(server.keys.admin, "planner"));
});
after(async () => server?.stop());

describe("shards", () => {
  test("a created decision shard reads back with its value and version 1", async () => {
    const shard = await zl.createShard("db_choice", { initialValue: "postgres", valueSchema: { enum: ["postgres", "dynamodb"] } });
    assert.equal(shard.version, 1);
    const read = await zl.getShard("db_choice");
    assert.equal(read.value, "postgres");
    assert.deepEqual(read.value_schema, { enum: ["postgres", "dynamodb"] });
  });

  test("commitShard takes the value, then the version it was based on, and bumps the version", async () => {
    const result = await zl.commitShard("db_choice", "dynamodb", 1);
    assert.equal(result.version, 2);
    assert.equal(result.value, "dynamodb");
    assert.ok(result.audit_entry_id > 0);
  });

  test("a losing commit throws StaleCommitError carrying the winning version and value", async () => {
    const error = await zl.commitShard("db_choice", "postgres", 1).catch((e) => e);
    assert.ok(error instanceof StaleCommitError);
    assert.ok(error instanceof ZeroLockError);
    assert.equal(error.code, "STALE_VERSION");
    assert.equal(error.status, 409);
    assert.equal(error.currentVersion, 2);
    assert.equal(error.currentValue, "dynamodb");
    assert.equal(error.details.expected_version, 1);
  });

  test("a minimal commit answers without the value", async () => {
    const result = await zl.commitShard("db_choice", "postgres", 2, { minimal: true });
    assert.equal(result.version, 3);
    assert.equal("value" in result, false);
  });

  test("a commit retried with the same idempotencyKey is applied once", async () => {
    const first = await zl.commitShard("db_choice", "dynamodb", 3, { idempotencyKey: "idem-1" });
    const again = await zl.commitShard("db_choice", "dynamodb", 3, { idempotencyKey: "idem-1" });
    assert.equal(first.version, 4);
    assert.deepEqual(again, first);
    assert.equal((await zl.getShard("db_choice")).version, 4);
  });

  test("a value outside the shard's schema throws SchemaViolationError", async () => {
    const error = await zl.commitShard("db_choice", "mysql", 4).catch((e) => e);
    assert.ok(error instanceof SchemaViolationError, String(error));
    assert.equal(error.code, "SCHEMA_VIOLATION");
  });

  test("a commit whose readSet moved on throws ReadSetStaleError naming the stale shard", async () => {
    await zl.createShard("budget", { initialValue: 10 });
    await zl.commitShard("budget", 20, 1);
    const error = await zl.commitShard("db_choice", "postgres", 4, { readSet: { budget: 1 } }).catch((e) => e);
    assert.ok(error instanceof ReadSetStaleError, String(error));
    assert.deepEqual(error.stale, [{ shard_id: "budget", read_version: 1, current_version: 2 }]);
    const ok = await zl.commitShard("db_choice", "postgres", 4, { readSet: { budget: 2 } });
    assert.equal(ok.version, 5);
  });

  test("a malformed shard id throws ValidationError", async () => {
    const error = await zl.createShard("no spaces allowed").catch((e) => e);
    assert.ok(error instanceof ValidationError, String(error));
    assert.equal(error.code, "VALIDATION_ERROR");
    assert.ok(error.details.fields);
  });

  test("creating a shard that exists throws ConflictError (SHARD_EXISTS)", async () => {
    const error = await zl.createShard("db_choice").catch((e) => e);
    assert.ok(error instanceof ConflictError, String(error));
    assert.equal(error.code, "SHARD_EXISTS");
  });

  test("reading a missing shard throws NotFoundError with the shard id", async () => {
    const error = await zl.getShard("nowhere").catch((e) => e);
    assert.ok(error instanceof NotFoundError);
    assert.equal(error.code, "SHARD_NOT_FOUND");
    assert.equal(error.details.shard_id, "nowhere");
  });

  test("listShards follows the pages and filters by prefix; history lists every version", async () => {
    const listed = await zl.listShards({ prefix: "db_" });
    assert.deepEqual(listed.map((s) => s.id), ["db_choice"]);
    const history = await zl.history("db_choice");
    assert.deepEqual(history.map((h) => h.version), [1, 2, 3, 4, 5]);
  });

  test("an owners-only shard refuses a commit by anyone else with PermissionDeniedError", async () => {
    await zl.createShard("owned", { initialValue: 0, ownerPolicy: "owners-only", owners: ["someone-else"] });
    const error = await zl.commitShard("owned", 1, 1).catch((e) => e);
    assert.ok(error instanceof PermissionDeniedError);
    assert.equal(error.code, "NOT_AN_OWNER");
  });

  test("deleteShard removes it", async () => {
    await zl.createShard("doomed");
    await zl.deleteShard("doomed");
    await assert.rejects(zl.getShard("doomed"), NotFoundError);
  });
});

describe("additive shards", () => {
  test("append adds items to an array shard and is never stale", async () => {
    await zl.createShard("findings", { type: "additive", crdtType: "array" });
    await zl.append("findings", ["a"]);
    const result = await zl.append("findings", ["b", "c"]);
    assert.deepEqual(result.value, ["a", "b", "c"]);
  });

  test("patch sets and deletes keys of a map shard", async () => {
    await zl.createShard("notes", { type: "additive", crdtType: "map", initialValue: { x: 1, gone: 2 } });
    const result = await zl.patch("notes", { y: 2, gone: null });
    assert.deepEqual(result.value, { x: 1, y: 2 });
  });

  test("delta edits a text shard", async () => {
    await zl.createShard("draft", { type: "additive", crdtType: "text", initialValue: "hello" });
    const result = await zl.delta("draft", [{ retain: 5 }, { insert: " world" }]);
    assert.equal(result.value, "hello world");
  });

  test("an operation of the wrong kind throws ValidationError (UNSUPPORTED_DIFF)", async () => {
    const error = await zl.append("notes", ["x"]).catch((e) => e);
    assert.ok(error instanceof ValidationError);
    assert.equal(error.code, "UNSUPPORTED_DIFF");
  });
});

describe("transactions and leases", () => {
  test("txn applies success when the compares hold and failure (with its reads) when not", async () => {
    await zl.createShard("cfg", { initialValue: { mode: "a" } });
    const won = await zl.txn({
      compare: [{ shard_id: "cfg", path: ["mode"], op: "==", value: "a" }],
      success: [{ op: "put", shard_id: "cfg", path: ["mode"], value: "b" }],
    });
    assert.equal(won.succeeded, true);
    assert.deepEqual(won.versions, { cfg: 2 });
    const lost = await zl.txn({
      compare: [{ shard_id: "cfg", path: ["mode"], op: "==", value: "a" }],
      success: [{ op: "put", shard_id: "cfg", path: ["mode"], value: "c" }],
      failure: [{ op: "get", shard_id: "cfg", path: ["mode"] }],
    });
    assert.equal(lost.succeeded, false);
    assert.equal(lost.responses?.[0]?.value, "b");
  });

  test("grantLease, keepalive and revokeLease; a path bound to the lease goes with it", async () => {
    const lease = await zl.grantLease(30);
    assert.match(lease.lease_id, /^lse_/);
    assert.equal(lease.holder, "planner");
    const kept = await zl.keepalive(lease.lease_id);
    assert.equal(kept.lease_id, lease.lease_id);
    await zl.txn({ success: [{ op: "put", shard_id: "cfg", path: ["owner"], value: "planner", lease_id: lease.lease_id }] });
    assert.equal(/** @type {any} */ ((await zl.getShard("cfg")).value).owner, "planner");
    await zl.revokeLease(lease.lease_id);
    assert.equal(/** @type {any} */ ((await zl.getShard("cfg")).value).owner, undefined);
    const error = await zl.keepalive(lease.lease_id).catch((e) => e);
    assert.ok(error instanceof NotFoundError);
    assert.equal(error.code, "LEASE_NOT_FOUND");
  });

  test("a write with a fence older than the shard's newest throws FencedError", async () => {
    const older = await zl.grantLease(30);
    const newer = await zl.grantLease(30);
    const shard = await zl.getShard("budget");
    await zl.commitShard("budget", 30, shard.version, { fence: newer.fence });
    const error = await zl.commitShard("budget", 40, (shard.version) + 1, { fence: older.fence }).catch((e) => e);
    assert.ok(error instanceof FencedError, String(error));
    assert.equal(error.currentFence, newer.fence);
  });

  test("an overlapping reservation throws ReservationConflictError listing who holds it", async () => {
    const mine = await zl.reserve("src/**", { ttlSeconds: 60, reason: "refactor" });
    const other = new ZeroLockClient(server.url, options(server.keys.admin, "other-agent"));
    const error = await other.reserve(["src/app.py"], { ttlSeconds: 60 }).catch((e) => e);
    assert.ok(error instanceof ReservationConflictError, String(error));
    assert.equal(error.conflicts[0]?.holder, "planner");
    await zl.releaseReservation(mine.reservation_id);
    const after = await other.reserve(["src/app.py"], { ttlSeconds: 60 });
    assert.equal(after.holder, "other-agent");
  });
});

describe("tasks and locks", () => {
  test("claimTask wins a pending task once; a second claimant learns who holds it", async () => {
    await zl.createShard("queue", { initialValue: { t1: { status: "pending" }, t2: { status: "pending" } } });
    const pending = await zl.getPendingTasks("queue");
    assert.deepEqual(pending.map((t) => t.id), ["t1", "t2"]);
    const mine = await zl.claimTask("queue", "t1");
    assert.deepEqual(mine, { taskId: "t1", claimed: true, holder: "planner" });
    const rival = new ZeroLockClient(server.url, options(server.keys.admin, "rival"));
    const theirs = await rival.claimTask("queue", "t1");
    assert.equal(theirs.claimed, false);
    assert.equal(theirs.holder, "planner");
  });

  test("completeTask records the result only for the holder", async () => {
    const rival = new ZeroLockClient(server.url, options(server.keys.admin, "rival"));
    assert.equal(await rival.completeTask("queue", "t1", { result: "stolen" }), false);
    assert.equal(await zl.completeTask("queue", "t1", { result: { rows: 3 } }), true);
    const task = /** @type {any} */ ((await zl.getShard("queue")).value).t1;
    assert.deepEqual(task, { status: "done", holder: "planner", result: { rows: 3 } });
  });

  test("failTask gives a task back pending without a holder, or marks it failed", async () => {
    await zl.claimTask("queue", "t2");
    assert.equal(await zl.failTask("queue", "t2", { error: "flaky" }), true);
    let task = /** @type {any} */ ((await zl.getShard("queue")).value).t2;
    assert.deepEqual(task, { status: "pending", error: "flaky" });
    await zl.claimTask("queue", "t2");
    assert.equal(await zl.failTask("queue", "t2", { error: "broken", retry: false }), true);
    task = /** @type {any} */ ((await zl.getShard("queue")).value).t2;
    assert.deepEqual(task, { status: "failed", error: "broken", holder: "planner" });
  });

  test("claimNext claims whichever task is pending, then answers null when none is left", async () => {
    await zl.createShard("queue2", { initialValue: { only: { status: "pending", n: 1 } } });
    const claimed = await zl.claimNext("queue2");
    assert.equal(claimed?.taskId, "only");
    assert.deepEqual(claimed?.task, { status: "claimed", n: 1, holder: "planner" });
    assert.equal(await zl.claimNext("queue2"), null);
  });

  test("a FileLock is held by one agent at a time and released by its holder", async () => {
    const rival = new ZeroLockClient(server.url, options(server.keys.admin, "rival"));
    const mine = new FileLock(zl, "locks");
    const theirs = new FileLock(rival, "locks");
    await mine.ensureShard();
    assert.equal(await mine.acquire("config.py"), true);
    assert.equal(await theirs.tryAcquire("config.py"), false);
    await assert.rejects(theirs.acquire("config.py", 150), LockTimeoutError);
    assert.equal(await theirs.release("config.py"), false);
    assert.equal(await mine.release("config.py"), true);
    assert.deepEqual(await theirs.acquireMultiple(["b.py", "a.py"]), ["a.py", "b.py"]);
    const held = /** @type {any} */ ((await zl.getShard("locks")).value);
    assert.equal(held["a.py"].holder, "rival");
    assert.ok(held["a.py"].expires_at > Date.now() / 1000);
  });

  test("an abandoned FileLock (its time passed) is taken over", async () => {
    const quick = new FileLock(zl, "locks", "planner", { holdSeconds: -1 });
    assert.equal(await quick.tryAcquire("stale.py"), true);
    const rival = new ZeroLockClient(server.url, options(server.keys.admin, "rival"));
    assert.equal(await new FileLock(rival, "locks").tryAcquire("stale.py"), true);
  });
});

describe("approvals", () => {
  test("an irreversible shard refuses a direct commit with IrreversibleShardError", async () => {
    await zl.createShard("prod_deploy", { initialValue: { release: "v1" }, reversible: false });
    const error = await zl.commitShard("prod_deploy", { release: "v2" }, 1).catch((e) => e);
    assert.ok(error instanceof IrreversibleShardError, String(error));
    assert.equal(error.code, "APPROVAL_REQUIRED");
  });

  test("requestApproval, then an officer's approve applies the commit and ends waitForApproval", async () => {
    const executor = new ZeroLockClient(server.url, options(server.keys.admin, "executor"));
    const officer = new ZeroLockClient(server.url, options(server.keys.officer, "officer"));
    const approval = await executor.requestApproval("prod_deploy", { release: "v2" }, 1, "ship v2", { ttlSeconds: 600 });
    assert.equal(approval.status, "pending");
    const pending = await officer.listApprovals({ status: "pending" });
    assert.deepEqual(pending.map((a) => a.id), [approval.id]);
    const started = Date.now();
    // A long poll interval: only the approval_decided push can end the wait quickly.
    const waiting = executor.waitForApproval(approval.id, { pollIntervalMs: 20_000, timeoutMs: 30_000 });
    await new Promise((r) => setTimeout(r, 300));
    const decided = await officer.approve(approval.id, "looks right");
    assert.equal(decided.status, "committed");
    const seen = await waiting;
    assert.equal(seen.status, "committed");
    assert.ok(Date.now() - started < 5_000, "the push, not the 20 s poll, ended the wait");
    assert.deepEqual((await zl.getShard("prod_deploy")).value, { release: "v2" });
    assert.equal((await officer.getApproval(approval.id)).status, "committed");
  });

  test("reject ends a request; approving it afterwards throws ConflictError", async () => {
    const executor = new ZeroLockClient(server.url, options(server.keys.admin, "executor"));
    const officer = new ZeroLockClient(server.url, options(server.keys.officer, "officer"));
    const approval = await executor.requestApproval("prod_deploy", { release: "v3" }, 2, "ship v3");
    const rejected = await officer.reject(approval.id, "not today");
    assert.equal(rejected.status, "rejected");
    assert.equal((await executor.waitForApproval(approval.id, { pollIntervalMs: 50 })).status, "rejected");
    const error = await officer.approve(approval.id).catch((e) => e);
    assert.ok(error instanceof ConflictError);
    assert.equal(error.code, "APPROVAL_NOT_PENDING");
  });

  test("requestChanges ends a request with its message; the next names it as previousId and is approved with an edit", async () => {
    const executor = new ApprovalClient(new ZeroLockClient(server.url, options(server.keys.admin, "executor")));
    const officer = new ApprovalClient(new ZeroLockClient(server.url, options(server.keys.officer, "officer")));
    await zl.createShard("vendor_payout", { initialValue: { amount: 0 }, reversible: false });
    const first = await executor.requestApproval("vendor_payout", { amount: 900 }, 1, "pay 900");
    const changed = await officer.requestChanges(first.id, "Ask for 450");
    assert.equal(changed.status, "changes_requested");
    const seen = await executor.waitForApproval(first.id, { pollIntervalMs: 50 });
    assert.equal(seen.status, "changes_requested");
    assert.equal(seen.reason, "Ask for 450");
    const second = await executor.requestApproval("vendor_payout", { amount: 450 }, 1, "pay 450", { previousId: first.id });
    assert.equal(second.previous_id, first.id);
    const approved = await officer.approve(second.id, "", {
      editedValue: { amount: 400 },
      expectedValueHash: second.applied_value_hash,
    });
    assert.equal(approved.status, "committed");
    assert.equal(approved.edited, true);
    assert.deepEqual((await zl.getShard("vendor_payout")).value, { amount: 400 });
    const error = await officer.requestChanges(second.id, "too late").catch((e) => e);
    assert.ok(error instanceof ConflictError, String(error));
  });

  test("the requester approving its own request throws SelfApprovalError", async () => {
    const executor = new ZeroLockClient(server.url, options(server.keys.admin, "executor"));
    const approval = await executor.requestApproval("prod_deploy", { release: "v4" }, 2, "ship v4");
    const error = await executor.approve(approval.id).catch((e) => e);
    assert.ok(error instanceof SelfApprovalError, String(error));
    assert.ok(error instanceof PermissionDeniedError);
  });

  test("a commit carrying another shard's approvalId throws ApprovalInvalidError with its reason", async () => {
    const [approval] = await zl.listApprovals({ shardId: "prod_deploy", status: "pending" });
    const error = await zl.commitShard("db_choice", "postgres", 5, { approvalId: approval?.id }).catch((e) => e);
    assert.ok(error instanceof ApprovalInvalidError, String(error));
    assert.equal(error.reason, "WRONG_SHARD");
  });

  test("ApprovalClient (the reference documents' shape) lists pending requests and decides them", async () => {
    const executor = new ApprovalClient(new ZeroLockClient(server.url, options(server.keys.admin, "executor")));
    const officer = new ApprovalClient(new ZeroLockClient(server.url, options(server.keys.officer, "officer")));
    await zl.createShard("payments", { initialValue: [], reversible: false });
    const approval = await executor.requestApproval("payments", [{ amount: 5 }], 1, "pay 5");
    const pending = await officer.listPendingApprovals({ shardId: "payments" });
    assert.deepEqual(pending.map((a) => a.id), [approval.id]);
    await officer.reject(approval.id, "no");
    assert.equal((await executor.waitForApproval(approval.id, { pollIntervalMs: 50 })).status, "rejected");
    const second = await executor.requestApproval("payments", [{ amount: 6 }], 1, "pay 6");
    assert.equal((await officer.approve(second.id, "ok")).status, "committed");
    assert.deepEqual((await executor.client.getShard("payments")).value, [{ amount: 6 }]);
  });

  test("waitForApproval gives up after timeoutMs while still pending", async () => {
    const [approval] = await zl.listApprovals({ shardId: "prod_deploy", status: "pending" });
    await assert.rejects(
      zl.waitForApproval(/** @type {string} */ (approval?.id), { pollIntervalMs: 50, timeoutMs: 200 }),
      /still pending/,
    );
  });
});

describe("keys", () => {
  test("a key without shard:create throws PermissionDeniedError naming the permission", async () => {
    const reader = new ZeroLockClient(server.url, options(server.keys.reader, "reader"));
    const error = await reader.createShard("nope").catch((e) => e);
    assert.ok(error instanceof PermissionDeniedError);
    assert.equal(error.details.permission, "shard:create");
  });

  test("an unknown key throws AuthenticationError", async () => {
    const stranger = new ZeroLockClient(server.url, options("zl_00000000.nope", "x"));
    const error = await stranger.getShard("db_choice").catch((e) => e);
    assert.ok(error instanceof AuthenticationError);
    assert.equal(error.status, 401);
  });

  test("no key at all throws MissingApiKeyError before anything is sent", async () => {
    const saved = process.env.ZEROLOCK_API_KEY;
    delete process.env.ZEROLOCK_API_KEY;
    try {
      const keyless = new ZeroLockClient(server.url, { agentId: "x" });
      const error = await keyless.getShard("db_choice").catch((e) => e);
      assert.ok(error instanceof MissingApiKeyError);
      assert.equal(keyless.requestsSent, 0);
      assert.equal((await keyless.health()).status !== undefined, true, "the public probe needs no key");
    } finally {
      if (saved !== undefined) process.env.ZEROLOCK_API_KEY = saved;
    }
  });

  test("the key defaults to process.env.ZEROLOCK_API_KEY", async () => {
    process.env.ZEROLOCK_API_KEY = server.keys.admin;
    try {
      const fromEnv = new ZeroLockClient(server.url, { agentId: "env" });
      assert.equal((await fromEnv.getShard("db_choice")).id, "db_choice");
    } finally {
      delete process.env.ZEROLOCK_API_KEY;
    }
  });

  test("a request left unanswered rejects with a TimeoutError after timeoutMs", async () => {
    const { createServer } = await import("node:net");
    /** @type {import("node:net").Socket[]} */
    const held = [];
    const silent = createServer((socket) => held.push(socket)); // accepts, never answers
    await new Promise((r) => silent.listen(0, "127.0.0.1", () => r(undefined)));
    const { port } = /** @type {import("node:net").AddressInfo} */ (silent.address());
    try {
      const client = new ZeroLockClient(`http://127.0.0.1:${port}`, { ...options(server.keys.admin, "x"), timeoutMs: 200 });
      const started = Date.now();
      const error = await client.getShard("db_choice").catch((e) => e);
      assert.equal(error.name, "TimeoutError");
      assert.ok(Date.now() - started < 5_000);
    } finally {
      for (const socket of held) socket.destroy();
      silent.close();
    }
  });

  test("over its rate limit a key throws RateLimitedError with retryAfter once retries are spent", async () => {
    const slow = new ZeroLockClient(server.url, { ...options(server.keys.slow, "slow"), maxRateLimitRetries: 0 });
    await slow.getShard("db_choice");
    const error = await slow.getShard("db_choice").catch((e) => e);
    assert.ok(error instanceof RateLimitedError, String(error));
    assert.equal(error.status, 429);
    assert.ok(error.retryAfter > 0);
  });
});
