/**
 * Task claiming on a decision shard: `{"task-id": {"status": "pending", ...}}`,
 * with the semantics of the Python SDK's zerolock_sdk/task_claim.py.
 *
 * claimNext asks the server for any pending task: one request, which claims one
 * or says nothing is left (no caller ever loses a request to another's claim).
 * claimTask claims a task you name: one transaction that wins or says who holds
 * it; against a server without transactions, the reference protocol runs instead
 * (write with the version read, wait, re-read, decide), because only the re-read
 * after the round trip says whether the write won.
 */
import type { ZeroLockClient } from "./client.js";
import { NotFoundError, StaleCommitError } from "./errors.js";
import type { ClaimResult, Task, TxnOperation } from "./types.js";

export interface ClaimTaskOptions {
  /** The claimant (default: the client's agent). */
  agentId?: string;
  /** The holder is removed when this lease ends (a crashed worker's task comes back). */
  leaseId?: string;
  /** A retry of a claim that won replays that win. */
  idempotencyKey?: string;
}

export interface ClaimNextOptions {
  /** What a free task looks like (default: {status: "pending"}). */
  where?: Record<string, string | number | boolean | null>;
  /** The fields a claimed task gets (default: {status: "claimed"}); the server adds the holder. */
  set?: Record<string, string | number | boolean | null>;
  leaseId?: string;
  idempotencyKey?: string;
}

type Obj = Record<string, unknown>;

function asObject(value: unknown): Obj {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Obj) : {};
}

function holderOf(task: Obj | null | undefined): string | null {
  const holder = task?.["holder"];
  return typeof holder === "string" ? holder : null;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export async function getPendingTasks(client: ZeroLockClient, shardId: string): Promise<Task[]> {
  const shard = await client.getShard(shardId);
  return Object.entries(asObject(shard.value))
    .filter(([, task]) => asObject(task)["status"] === "pending")
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([id, task]) => ({ id, data: asObject(task) }));
}

export async function claimTask(
  client: ZeroLockClient,
  shardId: string,
  taskId: string,
  options: ClaimTaskOptions = {},
): Promise<ClaimResult> {
  const agent = options.agentId ?? client.agentId;
  const holderOp: TxnOperation = { op: "put", shard_id: shardId, path: [taskId, "holder"], value: agent };
  if (options.leaseId) (holderOp as Obj)["lease_id"] = options.leaseId;
  let result;
  try {
    result = await client.txn(
      {
        compare: [{ shard_id: shardId, path: [taskId, "status"], op: "==", value: "pending" }],
        success: [{ op: "put", shard_id: shardId, path: [taskId, "status"], value: "claimed" }, holderOp],
        failure: [{ op: "get", shard_id: shardId, path: [taskId] }],
      },
      options.idempotencyKey ? { idempotencyKey: options.idempotencyKey } : {},
    );
  } catch (error) {
    // A 404 that is not about the shard: this server has no /api/txn.
    if (error instanceof NotFoundError && error.code !== "SHARD_NOT_FOUND") {
      return claimByRereading(client, shardId, taskId, agent);
    }
    throw error;
  }
  if (result.succeeded) return { taskId, claimed: true, holder: agent };
  const value = result.responses?.[0]?.value;
  const task = value !== null && typeof value === "object" ? (value as Obj) : null;
  return { taskId, claimed: false, holder: holderOf(task), task };
}

export async function claimNext(
  client: ZeroLockClient,
  queue: string,
  options: ClaimNextOptions = {},
): Promise<ClaimResult | null> {
  try {
    const claimed = await client.claim(
      queue,
      {
        where: options.where ?? { status: "pending" },
        set: options.set ?? { status: "claimed" },
        ...(options.leaseId ? { leaseId: options.leaseId } : {}),
      },
      options.idempotencyKey ? { idempotencyKey: options.idempotencyKey } : {},
    );
    return {
      taskId: claimed.task_id,
      claimed: true,
      holder: holderOf(claimed.task),
      task: claimed.task,
      version: claimed.version,
    };
  } catch (error) {
    if (error instanceof NotFoundError && error.code === "NOTHING_TO_CLAIM") return null;
    throw error;
  }
}

/** write -> wait -> re-read -> decide (the reference design's protocol). */
async function claimByRereading(
  client: ZeroLockClient,
  shardId: string,
  taskId: string,
  agent: string,
  waitMs = 50,
): Promise<ClaimResult> {
  for (;;) {
    const shard = await client.getShard(shardId);
    const value = asObject(shard.value);
    const task = asObject(value[taskId]);
    if (task["status"] !== "pending") {
      return { taskId, claimed: holderOf(task) === agent, holder: holderOf(task), task };
    }
    const next = { ...value, [taskId]: { ...task, status: "claimed", holder: agent } };
    try {
      await client.commitShard(shardId, next, shard.version, { minimal: true });
    } catch (error) {
      if (error instanceof StaleCommitError) continue;
      throw error;
    }
    await sleep(waitMs);
    const check = asObject(asObject((await client.getShard(shardId)).value)[taskId]);
    return { taskId, claimed: holderOf(check) === agent, holder: holderOf(check), task: check };
  }
}

/** Sets `status` (and `extra` fields, and `remove` paths) on a task only while `agent` holds it. */
async function finish(
  client: ZeroLockClient,
  shardId: string,
  taskId: string,
  agent: string,
  status: string,
  extra: Obj,
  remove: string[] = [],
): Promise<boolean> {
  const success: TxnOperation[] = [
    { op: "put", shard_id: shardId, path: [taskId, "status"], value: status },
    ...Object.entries(extra).map(
      ([k, v]): TxnOperation => ({ op: "put", shard_id: shardId, path: [taskId, k], value: v as never }),
    ),
    ...remove.map((k): TxnOperation => ({ op: "delete", shard_id: shardId, path: [taskId, k] })),
  ];
  const result = await client.txn(
    { compare: [{ shard_id: shardId, path: [taskId, "holder"], op: "==", value: agent }], success },
    { minimal: true }, // only whether it held is read
  );
  return result.succeeded;
}

export function completeTask(
  client: ZeroLockClient,
  shardId: string,
  taskId: string,
  options: { result?: unknown; agentId?: string } = {},
): Promise<boolean> {
  const extra = options.result !== undefined && options.result !== null ? { result: options.result } : {};
  return finish(client, shardId, taskId, options.agentId ?? client.agentId, "done", extra);
}

/**
 * Gives a task back (pending again, its holder removed) or marks it failed. The
 * holder goes in the same transaction as the status, so no other claimant's
 * fresh claim can lose its holder in between.
 */
export function failTask(
  client: ZeroLockClient,
  shardId: string,
  taskId: string,
  options: { error?: string; retry?: boolean } = {},
): Promise<boolean> {
  const retry = options.retry ?? true;
  const extra = options.error ? { error: options.error } : {};
  return finish(client, shardId, taskId, client.agentId, retry ? "pending" : "failed", extra, retry ? ["holder"] : []);
}
