/**
 * ZeroLock's TypeScript SDK. The core needs only `fetch` and a WebSocket (for
 * the cached client and approval pushes), so it runs in browsers and edge
 * runtimes as on Node. The Vercel AI SDK tools are a separate entry point,
 * `zerolock/ai`, so the core never loads `ai` or `zod`.
 */
export {
  ZeroLockClient,
  DEFAULT_URL,
  type ZeroLockClientOptions,
  type CreateShardOptions,
  type CommitOptions,
  type ApproveOptions,
  type AdditiveOptions,
  type WriteOptions,
  type TxnBody,
  type ClaimBody,
  type RequestApprovalOptions,
  type ReserveOptions,
  type Answer,
} from "./client.js";
export { CachedZeroLockClient, type CachedZeroLockClientOptions, type OnConflict } from "./cache.js";
export { FileLock, LockTimeoutError } from "./locks.js";
export { ApprovalClient, ApprovalTimeoutError, type WaitForApprovalOptions } from "./approvals.js";
export {
  claimNext,
  claimTask,
  completeTask,
  failTask,
  getPendingTasks,
  type ClaimNextOptions,
  type ClaimTaskOptions,
} from "./tasks.js";
export type { WebSocketConstructor, WebSocketLike } from "./socket.js";
export * from "./errors.js";
export type * from "./types.js";
export type { components as OpenApiComponents, paths as OpenApiPaths } from "./schema.gen.js";
