/**
 * File locks on a decision shard: `{"path": {"holder", "expires_at"}}`, the same
 * shape and rules as the Python SDK's zerolock_sdk/locks.py, so a TypeScript and
 * a Python agent can share one locks shard (`expires_at` is Unix time in seconds).
 *
 * Acquire is one compare-and-set: free, or held by a lock whose time has passed
 * (an abandoned lock), or already ours. Backoff between tries is exponential.
 */
import type { ZeroLockClient } from "./client.js";
import { NotFoundError } from "./errors.js";
import type { TxnOperation } from "./types.js";

export class LockTimeoutError extends Error {
  constructor(path: string) {
    super(`${path} is held by someone else`);
    this.name = "LockTimeoutError";
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class FileLock {
  readonly agentId: string;
  readonly holdSeconds: number;

  constructor(
    readonly client: ZeroLockClient,
    readonly shard: string,
    agentId?: string,
    options: { holdSeconds?: number } = {},
  ) {
    this.agentId = agentId ?? client.agentId;
    this.holdSeconds = options.holdSeconds ?? 60;
  }

  /** Creates the locks shard (an empty object) if it does not exist. */
  async ensureShard(): Promise<void> {
    try {
      await this.client.getShard(this.shard);
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
      await this.client.createShard(this.shard, { initialValue: {} });
    }
  }

  private put(path: string, now: number): TxnOperation {
    return {
      op: "put",
      shard_id: this.shard,
      path: [path],
      value: { holder: this.agentId, expires_at: now + this.holdSeconds },
    };
  }

  /** One try: true if the lock is now ours. */
  async tryAcquire(path: string): Promise<boolean> {
    const now = Date.now() / 1000;
    const result = await this.client.txn({
      compare: [{ shard_id: this.shard, path: [path, "expires_at"], op: "<", value: now }],
      success: [this.put(path, now)],
      failure: [{ op: "get", shard_id: this.shard, path: [path] }],
    });
    if (result.succeeded) return true; // it was abandoned: its time had passed
    const held = result.responses?.[0];
    if (!held?.found) {
      const free = await this.client.txn(
        { compare: [{ shard_id: this.shard, path: [path], op: "not_exists" }], success: [this.put(path, now)] },
        { minimal: true },
      );
      return free.succeeded;
    }
    if ((held.value as { holder?: unknown } | null)?.holder === this.agentId) {
      const renewed = await this.client.txn({ success: [this.put(path, now)] }, { minimal: true });
      return renewed.succeeded;
    }
    return false;
  }

  /** True once held; throws LockTimeoutError if still held by someone else at the end. */
  async acquire(path: string, timeoutMs = 30_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    let delay = 20;
    while (!(await this.tryAcquire(path))) {
      if (Date.now() + delay > deadline) throw new LockTimeoutError(path);
      await sleep(delay * (0.5 + Math.random()));
      delay = Math.min(delay * 2, 1_000);
    }
    return true;
  }

  /** Releases a lock this agent holds; false if it does not. */
  async release(path: string): Promise<boolean> {
    const result = await this.client.txn(
      {
        compare: [{ shard_id: this.shard, path: [path, "holder"], op: "==", value: this.agentId }],
        success: [{ op: "delete", shard_id: this.shard, path: [path] }],
      },
      { minimal: true },
    );
    return result.succeeded;
  }

  /** All or none, always in sorted order (so two agents cannot deadlock). */
  async acquireMultiple(paths: Iterable<string>, timeoutMs = 30_000): Promise<string[]> {
    const held: string[] = [];
    try {
      for (const path of [...new Set(paths)].sort()) {
        await this.acquire(path, timeoutMs);
        held.push(path);
      }
    } catch (error) {
      for (const path of held.reverse()) await this.release(path);
      throw error;
    }
    return held;
  }

  /** Runs `fn` holding every path, releasing them afterwards whatever happens. */
  async withLocks<T>(paths: string[], fn: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
    const held = await this.acquireMultiple(paths, timeoutMs);
    try {
      return await fn();
    } finally {
      for (const path of held.reverse()) await this.release(path);
    }
  }
}
