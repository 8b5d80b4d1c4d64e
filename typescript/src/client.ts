/**
 * The ZeroLock client: a thin, stateless wrapper over the REST API (docs/api.md).
 *
 * Every correctness decision stays on the server; the client turns answers into
 * typed results and error envelopes into error classes. A 429 is retried
 * (honouring Retry-After, bounded); nothing else is retried behind the caller's
 * back. Only `fetch` is used, so it runs in browsers and edge runtimes as on Node.
 */
import { MissingApiKeyError, RateLimitedError, errorFrom } from "./errors.js";
import {
  type WebSocketConstructor,
  resolveWebSocket,
} from "./socket.js";
import {
  claimNext,
  claimTask,
  completeTask,
  failTask,
  getPendingTasks,
  type ClaimNextOptions,
  type ClaimTaskOptions,
} from "./tasks.js";
import { waitForApproval, type WaitForApprovalOptions } from "./approvals.js";
import type {
  Approval,
  ClaimResult,
  ClaimedTask,
  CommitResult,
  CrdtType,
  HistoryEntry,
  JsonValue,
  Lease,
  OwnerPolicy,
  Reservation,
  Shard,
  ShardType,
  Task,
  TxnCompare,
  TxnOperation,
  TxnResult,
} from "./types.js";

export const DEFAULT_URL = "http://127.0.0.1:8000"; // where `make run` listens
const PUBLIC_PATHS = new Set(["/api/health", "/api/schema", "/api/docs"]);

export interface ZeroLockClientOptions {
  /** Defaults to process.env.ZEROLOCK_API_KEY where there is a `process`. */
  apiKey?: string;
  /** The acting agent (X-Agent-Id); every write needs one. */
  agentId?: string;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
  /** A WebSocket constructor where the runtime has no global one (Node 20: the `ws` package). */
  WebSocket?: WebSocketConstructor;
  /** How many 429s to wait out before throwing RateLimitedError (default 3). */
  maxRateLimitRetries?: number;
  /** The longest wait for one 429 (default 30 000 ms). */
  maxRetryWaitMs?: number;
  /** Abort a request unanswered after this long (default 30 000 ms): it rejects with a TimeoutError. */
  timeoutMs?: number;
}

export interface CreateShardOptions {
  type?: ShardType;
  initialValue?: unknown;
  crdtType?: CrdtType;
  valueSchema?: Record<string, unknown> | boolean | null;
  reversible?: boolean;
  approvalsRequired?: number;
  ownerPolicy?: OwnerPolicy;
  owners?: string[];
}

/** Options every write takes. */
export interface WriteOptions {
  /** Sent as Idempotency-Key: a retry with the same key is applied once. */
  idempotencyKey?: string;
  /** Prefer: return=minimal: the answer leaves the value out. */
  minimal?: boolean;
}

export interface ApproveOptions extends WriteOptions {
  /** Approve this value instead of the proposal (null is a value). */
  editedValue?: unknown;
  /** The `applied_value_hash` reviewed: refused (409) if the value changed since. */
  expectedValueHash?: string;
}

export interface CommitOptions extends WriteOptions {
  readSet?: Record<string, number>;
  fence?: number;
  approvalId?: string;
}

export interface AdditiveOptions extends WriteOptions {
  fence?: number;
}

export interface TxnBody {
  compare?: TxnCompare[];
  success?: TxnOperation[];
  failure?: TxnOperation[];
  fence?: number;
}

export interface ClaimBody {
  where: Record<string, string | number | boolean | null>;
  set: Record<string, string | number | boolean | null>;
  leaseId?: string;
  fence?: number;
}

export interface RequestApprovalOptions extends WriteOptions {
  ttlSeconds?: number;
  metadata?: Record<string, unknown>;
  /** The earlier request this one follows, after a decider asked for changes. */
  previousId?: string;
}

export interface ReserveOptions extends WriteOptions {
  exclusive?: boolean;
  ttlSeconds?: number;
  reason?: string;
  leaseId?: string;
}

interface RequestOptions extends WriteOptions {
  body?: unknown;
  params?: Record<string, string | number | undefined>;
}

/** The raw answer: its JSON (undefined for 204) and headers. */
export interface Answer<T> {
  body: T;
  headers: Headers;
}

function envKey(): string | undefined {
  // Only where there is a `process` (Node, Bun, Deno's compatibility layer);
  // browsers and edge runtimes must pass the key.
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.["ZEROLOCK_API_KEY"] || undefined;
}

function envUrl(): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.["ZEROLOCK_URL"] || undefined;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function pathOf(shardId: string): string {
  return encodeURIComponent(shardId);
}

export class ZeroLockClient {
  readonly baseUrl: string;
  readonly agentId: string;
  readonly apiKey: string;
  readonly maxRateLimitRetries: number;
  readonly maxRetryWaitMs: number;
  readonly timeoutMs: number;
  /** Requests sent over HTTP (a cached read sends none). */
  requestsSent = 0;
  protected readonly fetchImpl: typeof fetch;
  protected readonly WebSocketImpl: WebSocketConstructor | undefined;

  /** `new ZeroLockClient(url, { apiKey, agentId })`; url defaults to ZEROLOCK_URL, then the local server. */
  constructor(url?: string, options: ZeroLockClientOptions = {}) {
    this.baseUrl = (url || envUrl() || DEFAULT_URL).replace(/\/+$/, "");
    this.agentId = options.agentId ?? "";
    this.apiKey = options.apiKey ?? envKey() ?? "";
    this.maxRateLimitRetries = options.maxRateLimitRetries ?? 3;
    this.maxRetryWaitMs = options.maxRetryWaitMs ?? 30_000;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    const f = options.fetch ?? globalThis.fetch;
    // Bound, so a platform fetch is never called with this client as its `this`.
    this.fetchImpl = f.bind(globalThis);
    this.WebSocketImpl = resolveWebSocket(options.WebSocket);
  }

  // --- plumbing ---------------------------------------------------------------

  /** One request, its errors thrown as ZeroLockError subclasses, 429s waited out. */
  async request<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<Answer<T>> {
    const bare = path.split("?")[0] ?? path;
    if (!this.apiKey && !PUBLIC_PATHS.has(bare)) throw new MissingApiKeyError();
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.apiKey) headers["X-API-Key"] = this.apiKey;
    if (this.agentId) headers["X-Agent-Id"] = this.agentId;
    if (options.idempotencyKey) headers["Idempotency-Key"] = options.idempotencyKey;
    if (options.minimal) headers["Prefer"] = "return=minimal";
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    let url = `${this.baseUrl}${path}`;
    const params = Object.entries(options.params ?? {}).filter(
      (entry): entry is [string, string | number] => entry[1] !== undefined && entry[1] !== "",
    );
    if (params.length) {
      const query = new URLSearchParams(params.map(([k, v]) => [k, String(v)]));
      url += `${path.includes("?") ? "&" : "?"}${query}`;
    }
    for (let rateLimited = 0; ; rateLimited++) {
      this.requestsSent++;
      // One deadline for the answer and its body; a write that timed out may still
      // have been applied: retry it with the same idempotencyKey to find out.
      const signal = AbortSignal.timeout(this.timeoutMs);
      const response = await this.fetchImpl(url, { method, headers, body, signal });
      const text = await response.text();
      let json: unknown = undefined;
      if (text) {
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
      }
      if (response.ok) return { body: json as T, headers: response.headers };
      const error = errorFrom(response.status, json, response.headers.get("Retry-After"));
      if (error instanceof RateLimitedError && rateLimited < this.maxRateLimitRetries) {
        await sleep(Math.min(error.retryAfter * 1000, this.maxRetryWaitMs));
        continue;
      }
      throw error;
    }
  }

  private async call<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    return (await this.request<T>(method, path, options)).body;
  }

  /** A `next` link as a path: the server names it absolutely. */
  private relative(url: string): string {
    if (url.startsWith(this.baseUrl)) return url.slice(this.baseUrl.length);
    const parsed = new URL(url);
    return parsed.pathname + parsed.search;
  }

  // --- shards -----------------------------------------------------------------

  async getShard(shardId: string): Promise<Shard> {
    return this.call<Shard>("GET", `/api/shards/${pathOf(shardId)}`);
  }

  /** Every shard (following `next`), optionally those whose id starts with `prefix`. */
  async listShards(filters: { prefix?: string; type?: ShardType } = {}): Promise<Shard[]> {
    const shards: Shard[] = [];
    let path: string | null = "/api/shards";
    let params: RequestOptions["params"] = { prefix: filters.prefix, type: filters.type };
    while (path) {
      const page: { results: Shard[]; next: string | null } = await this.call("GET", path, { params });
      shards.push(...page.results);
      path = page.next ? this.relative(page.next) : null;
      params = undefined;
    }
    return shards;
  }

  async createShard(shardId: string, options: CreateShardOptions = {}, write: WriteOptions = {}): Promise<Shard> {
    const body: Record<string, unknown> = { id: shardId, type: options.type ?? "decision" };
    if (options.crdtType !== undefined) body["crdt_type"] = options.crdtType;
    if (options.initialValue !== undefined) body["initial_value"] = options.initialValue;
    if (options.valueSchema !== undefined) body["value_schema"] = options.valueSchema;
    if (options.reversible !== undefined) body["reversible"] = options.reversible;
    if (options.approvalsRequired !== undefined) body["approvals_required"] = options.approvalsRequired;
    if (options.ownerPolicy !== undefined) body["owner_policy"] = options.ownerPolicy;
    if (options.owners !== undefined) body["owners"] = options.owners;
    return this.call<Shard>("POST", "/api/shards", { ...write, body });
  }

  /**
   * Commits `newValue` to a decision shard if `expectedVersion` is still current.
   * Throws StaleCommitError (currentVersion, currentValue) when someone else won.
   */
  async commitShard(
    shardId: string,
    newValue: unknown,
    expectedVersion: number,
    options: CommitOptions = {},
  ): Promise<CommitResult> {
    const body: Record<string, unknown> = { expected_version: expectedVersion, new_value: newValue };
    if (options.readSet) body["read_set"] = options.readSet;
    if (options.approvalId) body["approval_id"] = options.approvalId;
    if (options.fence !== undefined) body["fence"] = options.fence;
    return this.call<CommitResult>("POST", `/api/shards/${pathOf(shardId)}/commit`, { ...options, body });
  }

  private additive(shardId: string, body: Record<string, unknown>, options: AdditiveOptions): Promise<CommitResult> {
    if (options.fence !== undefined) body["fence"] = options.fence;
    return this.call<CommitResult>("POST", `/api/shards/${pathOf(shardId)}/commit`, { ...options, body });
  }

  /** Appends items to an additive array shard (never stale). */
  append(shardId: string, items: unknown[], options: AdditiveOptions = {}): Promise<CommitResult> {
    return this.additive(shardId, { append: items }, options);
  }

  /** Sets keys of an additive map shard; a key given as null is deleted. */
  patch(shardId: string, patch: Record<string, unknown>, options: AdditiveOptions = {}): Promise<CommitResult> {
    return this.additive(shardId, { new_value: patch }, options);
  }

  /** Applies a Quill/Yjs delta ({retain}, {insert}, {delete}) to an additive text shard. */
  delta(
    shardId: string,
    delta: ({ retain: number } | { insert: string } | { delete: number })[],
    options: AdditiveOptions = {},
  ): Promise<CommitResult> {
    return this.additive(shardId, { delta }, options);
  }

  /** Every version, oldest first, following the server's `Link: rel="next"`. */
  async history(shardId: string): Promise<HistoryEntry[]> {
    const versions: HistoryEntry[] = [];
    let path: string | null = `/api/shards/${pathOf(shardId)}/history`;
    while (path) {
      const answer: Answer<HistoryEntry[]> = await this.request("GET", path);
      versions.push(...answer.body);
      const next = /<([^>]+)>;\s*rel="next"/.exec(answer.headers.get("Link") ?? "");
      path = next?.[1] ? this.relative(next[1]) : null;
    }
    return versions;
  }

  /** Deletes a shard (admin). */
  async deleteShard(shardId: string, options: WriteOptions = {}): Promise<void> {
    await this.call("DELETE", `/api/shards/${pathOf(shardId)}`, options);
  }

  // --- transactions, claims, leases -------------------------------------------------

  /** One transaction: the compares, then `success` or `failure`, atomically. */
  async txn(body: TxnBody, options: WriteOptions = {}): Promise<TxnResult> {
    const wire: Record<string, unknown> = {
      compare: body.compare ?? [],
      success: body.success ?? [],
      failure: body.failure ?? [],
    };
    if (body.fence !== undefined) wire["fence"] = body.fence;
    return this.call<TxnResult>("POST", "/api/txn", { ...options, body: wire });
  }

  /**
   * POST /api/shards/{id}/claim: the server picks a task whose fields equal
   * `where`, sets `set` and the holder (this agent). Throws NotFoundError with
   * code NOTHING_TO_CLAIM when none matches. Minimal unless asked otherwise.
   */
  async claim(shardId: string, body: ClaimBody, options: WriteOptions = {}): Promise<ClaimedTask> {
    const wire: Record<string, unknown> = { where: body.where, set: body.set };
    if (body.leaseId) wire["lease_id"] = body.leaseId;
    if (body.fence !== undefined) wire["fence"] = body.fence;
    return this.call<ClaimedTask>("POST", `/api/shards/${pathOf(shardId)}/claim`, {
      minimal: true,
      ...options,
      body: wire,
    });
  }

  /** Claims whichever pending task the server picks; null when none is left. */
  claimNext(queue: string, options: ClaimNextOptions = {}): Promise<ClaimResult | null> {
    return claimNext(this, queue, options);
  }

  /** Claims the task you name: won, or who holds it. */
  claimTask(shardId: string, taskId: string, options: ClaimTaskOptions = {}): Promise<ClaimResult> {
    return claimTask(this, shardId, taskId, options);
  }

  /** Marks a task this agent holds done (with an optional result); false if it does not hold it. */
  completeTask(shardId: string, taskId: string, options: { result?: unknown; agentId?: string } = {}): Promise<boolean> {
    return completeTask(this, shardId, taskId, options);
  }

  /** Gives a held task back (pending again) or, with `retry: false`, marks it failed. */
  failTask(shardId: string, taskId: string, options: { error?: string; retry?: boolean } = {}): Promise<boolean> {
    return failTask(this, shardId, taskId, options);
  }

  /** The pending tasks of a queue shard, sorted by id. */
  getPendingTasks(shardId: string): Promise<Task[]> {
    return getPendingTasks(this, shardId);
  }

  /** A lease of `ttlSeconds` (1-86400); `session`: kept alive by this agent's open sockets. */
  async grantLease(ttlSeconds: number, options: WriteOptions & { session?: boolean } = {}): Promise<Lease> {
    const body: Record<string, unknown> = { ttl_seconds: ttlSeconds };
    if (options.session) body["session"] = true;
    return this.call<Lease>("POST", "/api/leases", { ...options, body });
  }

  /** Another `ttl_seconds` from now. */
  async keepalive(leaseId: string, options: WriteOptions = {}): Promise<Lease> {
    return this.call<Lease>("POST", `/api/leases/${encodeURIComponent(leaseId)}/keepalive`, options);
  }

  /** Ends the lease now: every path bound to it is removed. */
  async revokeLease(leaseId: string, options: WriteOptions = {}): Promise<void> {
    await this.call("DELETE", `/api/leases/${encodeURIComponent(leaseId)}`, options);
  }

  // --- path reservations ----------------------------------------------------------

  /** Reserves the paths the globs match for this agent (exclusive by default). */
  async reserve(patterns: string | string[], options: ReserveOptions = {}): Promise<Reservation> {
    const body: Record<string, unknown> = {
      patterns: typeof patterns === "string" ? [patterns] : patterns,
      exclusive: options.exclusive ?? true,
    };
    if (options.ttlSeconds !== undefined) body["ttl_seconds"] = options.ttlSeconds;
    if (options.reason !== undefined) body["reason"] = options.reason;
    if (options.leaseId !== undefined) body["lease_id"] = options.leaseId;
    return this.call<Reservation>("POST", "/api/reservations", { ...options, body });
  }

  async releaseReservation(reservationId: string, options: WriteOptions = {}): Promise<void> {
    await this.call("DELETE", `/api/reservations/${encodeURIComponent(reservationId)}`, options);
  }

  // --- approvals --------------------------------------------------------------------

  /** Asks for a commit to an irreversible shard; approving it applies the commit. */
  async requestApproval(
    shardId: string,
    proposedValue: unknown,
    expectedVersion: number,
    description: string,
    options: RequestApprovalOptions = {},
  ): Promise<Approval> {
    const body: Record<string, unknown> = {
      shard_id: shardId,
      proposed_value: proposedValue,
      expected_version: expectedVersion,
      description,
      ttl_seconds: options.ttlSeconds ?? 3600,
    };
    if (options.metadata !== undefined) body["metadata"] = options.metadata;
    if (options.previousId !== undefined) body["previous_id"] = options.previousId;
    return this.call<Approval>("POST", "/api/approvals/request", { ...options, body });
  }

  async getApproval(approvalId: string): Promise<Approval> {
    return this.call<Approval>("GET", `/api/approvals/${encodeURIComponent(approvalId)}`);
  }

  /** Every approval that matches, newest first, through the keyset pages. */
  async listApprovals(filters: { status?: string; shardId?: string; requestedBy?: string } = {}): Promise<Approval[]> {
    const approvals: Approval[] = [];
    let path: string | null = "/api/approvals";
    let params: RequestOptions["params"] = {
      status: filters.status,
      shard_id: filters.shardId,
      requested_by: filters.requestedBy,
    };
    while (path) {
      const page: { results: Approval[]; next: string | null } = await this.call("GET", path, { params });
      approvals.push(...page.results);
      path = page.next ? this.relative(page.next) : null;
      params = undefined;
    }
    return approvals;
  }

  /**
   * `editedValue`: approve this value instead of the proposal (checked like a
   * commit). `expectedValueHash`: the `applied_value_hash` you reviewed; if
   * another decider edited the value since, 409 APPROVAL_VALUE_CHANGED and
   * nothing is recorded.
   */
  async approve(approvalId: string, reason = "", options: ApproveOptions = {}): Promise<Approval> {
    const { editedValue, expectedValueHash, ...write } = options;
    const body: Record<string, unknown> = { reason };
    if ("editedValue" in options) body.edited_value = editedValue;
    if (expectedValueHash !== undefined) body.expected_value_hash = expectedValueHash;
    return this.call<Approval>("POST", `/api/approvals/${encodeURIComponent(approvalId)}/approve`, {
      ...write,
      body,
    });
  }

  async reject(approvalId: string, reason: string, options: WriteOptions = {}): Promise<Approval> {
    return this.call<Approval>("POST", `/api/approvals/${encodeURIComponent(approvalId)}/reject`, {
      ...options,
      body: { reason },
    });
  }

  /**
   * Ends the request with status "changes_requested": nothing is written, and
   * `message` (required) reaches the agent as the approval's `reason`. The agent
   * asks again with `requestApproval(..., { previousId })`.
   */
  async requestChanges(approvalId: string, message: string, options: WriteOptions = {}): Promise<Approval> {
    return this.call<Approval>(
      "POST",
      `/api/approvals/${encodeURIComponent(approvalId)}/request-changes`,
      { ...options, body: { message } },
    );
  }

  /**
   * Until the approval is decided (status no longer "pending"): "committed"
   * (applied: `commit.version`), "approved_stale", "rejected", "expired". The
   * `approval_decided` push on the agent socket ends the wait at once where a
   * WebSocket is available; polling every `pollIntervalMs` is the fallback.
   */
  waitForApproval(approvalId: string, options: WaitForApprovalOptions = {}): Promise<Approval> {
    return waitForApproval(this, approvalId, options);
  }

  // --- the rest ----------------------------------------------------------------------

  async health(): Promise<Record<string, unknown>> {
    return this.call("GET", "/api/health");
  }

  /** /ws/agents/ on the same host, with the key and agent in the query. */
  get wsUrl(): string {
    return this.agentSocketUrl(`${this.baseUrl.replace(/^http/, "ws")}/ws/agents/`);
  }

  /** `base` with this client's key and agent in the query (raises without a key). */
  agentSocketUrl(base: string): string {
    if (!this.apiKey) throw new MissingApiKeyError();
    const url = new URL(base);
    url.searchParams.set("api_key", this.apiKey);
    if (this.agentId) url.searchParams.set("agent_id", this.agentId);
    return url.toString();
  }

  /** The WebSocket constructor this client will use, if any. */
  get webSocketConstructor(): WebSocketConstructor | undefined {
    return this.WebSocketImpl;
  }
}

export type { JsonValue };
