/**
 * ZeroLock as Vercel AI SDK tools: `import { createZeroLockTools } from "zerolock/ai"`.
 *
 * A separate entry point so the core never loads `ai` or `zod` (both are
 * optional peer dependencies, needed only here). Refusals a model can act on
 * come back as tool results rather than thrown errors: above all a stale commit,
 * whose result carries the winning version and value so the model can decide
 * again from what actually won.
 */
import { tool } from "ai";
import { z } from "zod";
import type { ZeroLockClient } from "./client.js";
import { StaleCommitError, ZeroLockError } from "./errors.js";

export interface ZeroLockToolsOptions {
  /** Add requestApproval and checkApproval (for irreversible shards). */
  approvals?: boolean;
}

/** A refusal as the model sees it: the code, the server's message, its details. */
function refusal(error: unknown): Record<string, unknown> {
  if (!(error instanceof ZeroLockError)) throw error; // a bug or an outage is not the model's to fix
  const hint =
    error.code === "APPROVAL_REQUIRED"
      ? "This shard is irreversible: ask for a human's approval with requestApproval instead."
      : undefined;
  return { ok: false, error: error.code, message: error.message, details: error.details, ...(hint ? { hint } : {}) };
}

const shardId = z.string().min(1).max(128).describe("The shard's id, e.g. db_schema_choice");

export function createZeroLockTools(client: ZeroLockClient, options: ZeroLockToolsOptions = {}) {
  const tools = {
    readShard: tool({
      description:
        "Read a ZeroLock shard: shared state other agents also read and write. Returns its current " +
        "value and version; pass that version as expectedVersion when you commit a change.",
      inputSchema: z.object({ shardId }),
      execute: async ({ shardId }) => {
        try {
          const shard = await client.getShard(shardId);
          return { ok: true, shardId, type: shard.type, version: shard.version, value: shard.value };
        } catch (error) {
          return refusal(error);
        }
      },
    }),
    commitShard: tool({
      description:
        "Replace the value of a decision shard, only if it is still at expectedVersion (the version " +
        "you read). If another agent committed first the result has stale: true with currentVersion " +
        "and currentValue: decide again from currentValue and commit with expectedVersion = currentVersion.",
      inputSchema: z.object({
        shardId,
        newValue: z.unknown().describe("The whole new value (any JSON)."),
        expectedVersion: z.number().int().min(1).describe("The version you read with readShard."),
      }),
      execute: async ({ shardId, newValue, expectedVersion }) => {
        try {
          const result = await client.commitShard(shardId, newValue ?? null, expectedVersion);
          return { ok: true, committed: true, shardId, version: result.version };
        } catch (error) {
          if (error instanceof StaleCommitError) {
            return {
              ok: false,
              committed: false,
              stale: true,
              shardId,
              currentVersion: error.currentVersion,
              currentValue: error.currentValue,
              message:
                `Another agent committed first: version ${error.currentVersion} holds currentValue. ` +
                `Decide again from it and commit with expectedVersion ${error.currentVersion}.`,
            };
          }
          return { committed: false, ...refusal(error) };
        }
      },
    }),
    claimTask: tool({
      description:
        "Claim a task from a task-queue shard so that no other agent works on it. Without taskId the " +
        "server picks any pending task (claimed: false and taskId null when none is left); with taskId, " +
        "that task (claimed: false and its holder when someone else has it).",
      inputSchema: z.object({
        queueShardId: shardId.describe("The queue shard's id"),
        taskId: z.string().min(1).optional().describe("A task to claim; omit to take any pending one"),
      }),
      execute: async ({ queueShardId, taskId }) => {
        try {
          if (taskId !== undefined) {
            const result = await client.claimTask(queueShardId, taskId);
            return { ok: true, ...result };
          }
          const next = await client.claimNext(queueShardId);
          return next ? { ok: true, ...next } : { ok: true, claimed: false, taskId: null, holder: null };
        } catch (error) {
          return refusal(error);
        }
      },
    }),
  };
  if (!options.approvals) return tools;
  return {
    ...tools,
    requestApproval: tool({
      description:
        "Ask a human to approve a change to an irreversible shard (one that refuses commits with " +
        "APPROVAL_REQUIRED). Approving applies the change; check the outcome with checkApproval.",
      inputSchema: z.object({
        shardId,
        proposedValue: z.unknown().describe("The whole new value you propose (any JSON)."),
        expectedVersion: z.number().int().min(1).describe("The version you read with readShard."),
        description: z.string().min(1).max(4000).describe("What the change does and why, for the approver."),
      }),
      execute: async ({ shardId, proposedValue, expectedVersion, description }) => {
        try {
          const approval = await client.requestApproval(shardId, proposedValue ?? null, expectedVersion, description);
          return { ok: true, approvalId: approval.id, status: approval.status, expiresAt: approval.expires_at };
        } catch (error) {
          return refusal(error);
        }
      },
    }),
    checkApproval: tool({
      description:
        "The state of an approval request: pending, committed (approved and applied), approved_stale " +
        "(approved but the shard had moved on: nothing applied), rejected (with the reason) or expired.",
      inputSchema: z.object({ approvalId: z.string().min(1).describe("The id requestApproval returned") }),
      execute: async ({ approvalId }) => {
        try {
          const approval = await client.getApproval(approvalId);
          return { ok: true, approvalId, status: approval.status, reason: approval.reason, commit: approval.commit };
        } catch (error) {
          return refusal(error);
        }
      },
    }),
  };
}
