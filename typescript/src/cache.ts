/**
 * A client that serves reads from memory while they are fresh, with the Python
 * SDK's semantics (zerolock_sdk/cache.py).
 *
 * An entry is Fresh until the server says otherwise (an `invalidate` push on
 * /ws/agents/ for a shard this client read) or, with `ttlMs`, until it is older
 * than that. Writes always go to the server, and a commit's 200 refreshes the
 * entry. Without a socket the cache still honours `ttlMs` (unset: no caching at
 * all, since nothing would ever say an entry went stale).
 *
 * The socket: `wsUrl` (default the server's /ws/agents/), opened by
 * `connectWs()`, or by the first read with `autoConnectWs: true` (the default).
 */
import {
  ZeroLockClient,
  type AdditiveOptions,
  type ClaimBody,
  type CommitOptions,
  type TxnBody,
  type WriteOptions,
  type ZeroLockClientOptions,
} from "./client.js";
import { AgentSocket } from "./socket.js";
import type { ClaimedTask, CommitResult, Shard, TxnResult } from "./types.js";

/** `(shardId, version, winning, rejected, diff, event)`: the reference documents' five, then the frame. */
export type OnConflict = (
  shardId: string,
  version: number | null,
  winning: unknown,
  rejected: unknown,
  diff: unknown,
  event: Record<string, unknown>,
) => unknown;

export interface CachedZeroLockClientOptions extends ZeroLockClientOptions {
  /** The agent socket's URL (default: the server's /ws/agents/); the key and agent are added. */
  wsUrl?: string;
  /** Open the socket on the first read (default true); false: call connectWs() yourself. */
  autoConnectWs?: boolean;
  /** The longest an entry is served from memory; unset: until invalidated (needs the socket). */
  ttlMs?: number;
  /** Where a failing onConflict callback is reported (default console.error). */
  onError?: (error: unknown) => void;
}

interface Entry {
  shard: Shard;
  at: number;
  fresh: boolean;
}

export class CachedZeroLockClient extends ZeroLockClient {
  readonly ttlMs: number | undefined;
  /** Reads answered from memory. */
  cacheHits = 0;
  private readonly entries = new Map<string, Entry>();
  private readonly autoConnectWs: boolean;
  private readonly socketBase: string | undefined;
  private readonly onError: (error: unknown) => void;
  private socket: AgentSocket | undefined;
  private connecting: Promise<void> | undefined;
  private autoConnectFailed = false;
  private onConflict: OnConflict | undefined;
  private resubscribed: Promise<void> | undefined;

  constructor(url?: string, options: CachedZeroLockClientOptions = {}) {
    super(url, options);
    this.ttlMs = options.ttlMs;
    this.autoConnectWs = options.autoConnectWs ?? true;
    this.socketBase = options.wsUrl;
    this.onError = options.onError ?? ((error) => console.error("zerolock: onConflict failed:", error));
  }

  /** Whether the agent socket is open (pushes reach this cache). */
  get socketOpen(): boolean {
    return this.socket?.isOpen ?? false;
  }

  /**
   * Opens the agent socket, rejecting if it cannot. Needs a WebSocket: the
   * runtime's global one or the `WebSocket` option (on Node 20, the `ws` package).
   * While it is down reads fall back to `ttlMs`; it reopens by itself and then
   * reads every entry again (what changed meanwhile went unheard).
   */
  connectWs(): Promise<void> {
    if (this.socket?.isOpen) return Promise.resolve();
    if (this.connecting) return this.connecting;
    const WebSocket = this.webSocketConstructor;
    if (!WebSocket) {
      return Promise.reject(
        new Error("no WebSocket in this runtime: pass { WebSocket } (on Node 20: the `ws` package)"),
      );
    }
    const url = this.agentSocketUrl(this.socketBase ?? `${this.baseUrl.replace(/^http/, "ws")}/ws/agents/`);
    const socket = new AgentSocket({
      url,
      WebSocket,
      onPush: (frame) => this.pushed(frame),
      onOpen: () => this.opened(socket),
    });
    this.connecting = socket.connect().then(
      () => {
        this.socket = socket;
        this.connecting = undefined;
      },
      (error: unknown) => {
        this.connecting = undefined;
        throw error;
      },
    );
    return this.connecting;
  }

  /** Closes the socket; the client still works over HTTP (cache by `ttlMs` only). */
  close(): void {
    this.socket?.close();
    this.socket = undefined;
  }

  /** The reference documents' hook: called for each `conflict_notify` this agent gets. */
  setOnConflict(callback: OnConflict | undefined): void {
    this.onConflict = callback;
  }

  /** Whether a read of this shard would be answered from memory now. */
  isFresh(shardId: string): boolean {
    return this.usable(this.entries.get(shardId));
  }

  /** Marks an entry stale: the next read goes to the server. */
  invalidate(shardId: string): void {
    const entry = this.entries.get(shardId);
    if (entry) entry.fresh = false;
  }

  private usable(entry: Entry | undefined): boolean {
    if (!entry?.fresh) return false;
    const young = this.ttlMs === undefined || Date.now() - entry.at < this.ttlMs;
    // Without the socket nothing says an entry went stale: only a TTL bounds it.
    return this.socketOpen ? young : this.ttlMs !== undefined && young;
  }

  override async getShard(shardId: string): Promise<Shard> {
    const entry = this.entries.get(shardId);
    if (entry && this.usable(entry)) {
      this.cacheHits++;
      return entry.shard;
    }
    if (this.autoConnectWs && !this.socket && !this.autoConnectFailed) {
      // One try: with no socket to be had, the cache works by TTL (as documented).
      await this.connectWs().catch(() => {
        this.autoConnectFailed = true;
      });
    }
    await this.resubscribed;
    if (!this.entries.has(shardId) && this.socket?.isOpen) {
      // Subscribed before the read: a change after the read is always heard, and
      // one between the two is ignored by its version (the read has it already).
      await this.socket.ask(
        { type: "subscribe", shard_ids: [shardId] },
        "subscribed",
        (f) => Array.isArray(f["shard_ids"]) && (f["shard_ids"] as unknown[]).includes(shardId),
      );
    }
    const shard = await super.getShard(shardId);
    this.entries.set(shardId, { shard, at: Date.now(), fresh: true });
    return shard;
  }

  override async commitShard(
    shardId: string,
    newValue: unknown,
    expectedVersion: number,
    options: CommitOptions = {},
  ): Promise<CommitResult> {
    let result: CommitResult;
    try {
      result = await super.commitShard(shardId, newValue, expectedVersion, options);
    } catch (error) {
      this.invalidate(shardId);
      throw error;
    }
    const entry = this.entries.get(shardId);
    if (entry && !options.minimal && "value" in result) {
      const shard = { ...entry.shard, value: result.value, version: result.version };
      this.entries.set(shardId, { shard, at: Date.now(), fresh: true });
    } else {
      this.invalidate(shardId); // no value came back to refresh the entry with
    }
    return result;
  }

  // The server sends no `invalidate` to the socket of the agent that wrote, so
  // every other write of this client's own marks what it touched stale itself.
  override async append(shardId: string, items: unknown[], options: AdditiveOptions = {}): Promise<CommitResult> {
    return this.touching([shardId], () => super.append(shardId, items, options));
  }

  override async patch(shardId: string, patch: Record<string, unknown>, options: AdditiveOptions = {}): Promise<CommitResult> {
    return this.touching([shardId], () => super.patch(shardId, patch, options));
  }

  override async delta(
    shardId: string,
    delta: Parameters<ZeroLockClient["delta"]>[1],
    options: AdditiveOptions = {},
  ): Promise<CommitResult> {
    return this.touching([shardId], () => super.delta(shardId, delta, options));
  }

  override async claim(shardId: string, body: ClaimBody, options: WriteOptions = {}): Promise<ClaimedTask> {
    return this.touching([shardId], () => super.claim(shardId, body, options));
  }

  override async txn(body: TxnBody, options: WriteOptions = {}): Promise<TxnResult> {
    const written = [...(body.success ?? []), ...(body.failure ?? [])]
      .filter((op) => op.op !== "get")
      .map((op) => op.shard_id);
    return this.touching(written, () => super.txn(body, options));
  }

  private async touching<T>(shardIds: string[], write: () => Promise<T>): Promise<T> {
    try {
      return await write();
    } finally {
      for (const id of shardIds) this.invalidate(id);
    }
  }

  private opened(socket: AgentSocket): void {
    // A new connection holds no subscriptions, and what changed while there was
    // none went unheard: every entry is read again, and subscribed to.
    for (const entry of this.entries.values()) entry.fresh = false;
    const ids = [...this.entries.keys()].sort();
    if (ids.length) {
      // Reads wait for the answer, as a first read waits for its own subscription.
      // (`socket` is open here, but not yet this.socket on the first connection.)
      this.resubscribed = socket
        .ask({ type: "subscribe", shard_ids: ids }, "subscribed", (f) => Array.isArray(f["shard_ids"]) && f["shard_ids"].length === ids.length)
        .then(() => undefined);
    }
  }

  private pushed(frame: Record<string, unknown>): void {
    const shardId = frame["shard_id"];
    if (typeof shardId !== "string") return;
    if (frame["type"] === "invalidate") {
      const entry = this.entries.get(shardId);
      const version = frame["version"];
      if (entry && (typeof version !== "number" || entry.shard.version < version)) {
        entry.fresh = false; // a newer version, or the shard was deleted
      }
    } else if (frame["type"] === "conflict_notify") {
      this.invalidate(shardId);
      const callback = this.onConflict;
      if (!callback) return;
      // A failing callback is reported, not thrown: throwing here would end the
      // socket's reader, and with it every invalidation this cache relies on.
      try {
        const outcome = callback(
          shardId,
          typeof frame["version"] === "number" ? frame["version"] : null,
          frame["winning_value"],
          frame["rejected_value"],
          frame["diff"],
          frame,
        );
        if (outcome instanceof Promise) outcome.catch(this.onError);
      } catch (error) {
        this.onError(error);
      }
    }
  }
}
