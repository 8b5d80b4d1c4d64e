/**
 * Waiting for an approval's decision (zerolock_sdk/approvals.py's
 * wait_for_approval): the `approval_decided` push on the agent socket ends the
 * wait at once; polling GET /api/approvals/{id} is the fallback, and the truth.
 */
import type { ApproveOptions, ZeroLockClient } from "./client.js";
import { AgentSocket } from "./socket.js";
import type { Approval } from "./types.js";

export interface WaitForApprovalOptions {
  /** Polling interval (default 5000 ms). */
  pollIntervalMs?: number;
  /** Give up after this long (default one hour): throws an Error saying it is still pending. */
  timeoutMs?: number;
}

export class ApprovalTimeoutError extends Error {
  constructor(approvalId: string) {
    super(`approval ${approvalId} is still pending`);
    this.name = "ApprovalTimeoutError";
  }
}

export async function waitForApproval(
  client: ZeroLockClient,
  approvalId: string,
  options: WaitForApprovalOptions = {},
): Promise<Approval> {
  const interval = options.pollIntervalMs ?? 5_000;
  const deadline = Date.now() + (options.timeoutMs ?? 3_600_000);
  let wake: (() => void) | undefined;
  let socket: AgentSocket | undefined;
  const WebSocket = client.webSocketConstructor;
  if (WebSocket && client.agentId) {
    const candidate = new AgentSocket({
      url: client.wsUrl,
      WebSocket,
      reconnect: false,
      connectTimeoutMs: 5_000,
      onPush: (frame) => {
        if (frame["type"] === "approval_decided" && frame["approval_id"] === approvalId) wake?.();
      },
    });
    // No socket is no loss: polling still finds the decision.
    socket = await candidate.connect().then(
      () => candidate,
      () => undefined,
    );
  }
  try {
    for (;;) {
      const approval = await client.getApproval(approvalId);
      if (approval.status !== "pending") return approval;
      const left = deadline - Date.now();
      if (left <= 0) throw new ApprovalTimeoutError(approvalId);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(interval, left));
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  } finally {
    socket?.close();
  }
}

/**
 * The reference documents' ApprovalClient, for code written against them:
 * `approvals.client` is the underlying ZeroLockClient, and every call is the
 * client's own (zerolock_sdk/approvals.py's ApprovalClient, in camelCase).
 */
export class ApprovalClient {
  constructor(readonly client: ZeroLockClient) {}

  requestApproval(...args: Parameters<ZeroLockClient["requestApproval"]>): Promise<Approval> {
    return this.client.requestApproval(...args);
  }

  waitForApproval(approvalId: string, options: WaitForApprovalOptions = {}): Promise<Approval> {
    return waitForApproval(this.client, approvalId, options);
  }

  /** The pending approvals (optionally of one shard or requester), newest first. */
  listPendingApprovals(filters: { shardId?: string; requestedBy?: string } = {}): Promise<Approval[]> {
    return this.client.listApprovals({ ...filters, status: "pending" });
  }

  approve(approvalId: string, reason = "", options: ApproveOptions = {}): Promise<Approval> {
    return this.client.approve(approvalId, reason, options);
  }

  reject(approvalId: string, reason: string): Promise<Approval> {
    return this.client.reject(approvalId, reason);
  }

  requestChanges(approvalId: string, message: string): Promise<Approval> {
    return this.client.requestChanges(approvalId, message);
  }
}
