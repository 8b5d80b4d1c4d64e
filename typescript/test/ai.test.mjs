// The Vercel AI SDK tools through a real generateText tool loop, driven by the
// AI SDK's own mock language model (ai/test), against a live server.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { ZeroLockClient } from "../dist/index.js";
import { createZeroLockTools } from "../dist/ai.js";
import { startServer } from "./helpers/server.mjs";

/** @type {Awaited<ReturnType<typeof startServer>>} */
let server;

before(async () => {
  server = await startServer({ admin: "--permissions admin", officer: "--permissions approval:*,shard:read" });
});
after(async () => server?.stop());

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

/**
 * One model turn that calls a tool.
 * @returns {import("@ai-sdk/provider").LanguageModelV4GenerateResult}
 */
const callTool = (/** @type {string} */ toolName, /** @type {object} */ input, /** @type {string} */ id) => ({
  content: [{ type: /** @type {const} */ ("tool-call"), toolCallId: id, toolName, input: JSON.stringify(input) }],
  finishReason: { unified: /** @type {const} */ ("tool-calls"), raw: "tool_calls" },
  usage,
  warnings: [],
});
/** @returns {import("@ai-sdk/provider").LanguageModelV4GenerateResult} */
const say = (/** @type {string} */ text) => ({
  content: [{ type: /** @type {const} */ ("text"), text }],
  finishReason: { unified: /** @type {const} */ ("stop"), raw: "stop" },
  usage,
  warnings: [],
});

/** The output of the tool result with this call id, from the prompt the model was given. */
function toolResult(/** @type {any} */ prompt, /** @type {string} */ id) {
  for (const message of prompt) {
    if (message.role !== "tool") continue;
    for (const part of message.content) {
      if (part.type === "tool-result" && part.toolCallId === id) return part.output;
    }
  }
  return undefined;
}

test("a stale commit returns the winning value and version to the model, which then commits on it", async () => {
  const agent = new ZeroLockClient(server.url, { apiKey: server.keys.admin, agentId: "llm-agent" });
  const rival = new ZeroLockClient(server.url, { apiKey: server.keys.admin, agentId: "rival" });
  await agent.createShard("db_choice", { initialValue: { engine: "postgres", votes: 1 } });

  /** @type {any[]} */
  const prompts = [];
  const model = new MockLanguageModelV4({
    doGenerate: async (/** @type {any} */ options) => {
      prompts.push(options.prompt);
      switch (prompts.length) {
        case 1:
          return callTool("readShard", { shardId: "db_choice" }, "read-1");
        case 2: {
          const read = toolResult(options.prompt, "read-1");
          assert.equal(read.type, "json");
          assert.equal(read.value.version, 1);
          // Another agent wins the race between the model's read and its commit.
          await rival.commitShard("db_choice", { engine: "dynamodb", votes: 2 }, 1);
          return callTool("commitShard", { shardId: "db_choice", newValue: { engine: "cockroach", votes: 2 }, expectedVersion: 1 }, "commit-1");
        }
        case 3: {
          const stale = toolResult(options.prompt, "commit-1").value;
          // The model decides again from what won: keep its engine, add a vote.
          return callTool(
            "commitShard",
            { shardId: "db_choice", newValue: { ...stale.currentValue, votes: stale.currentValue.votes + 1 }, expectedVersion: stale.currentVersion },
            "commit-2",
          );
        }
        default:
          return say("Committed on top of the winning value.");
      }
    },
  });

  const result = await generateText({
    model,
    tools: createZeroLockTools(agent),
    prompt: "Record your vote on the database choice.",
    stopWhen: stepCountIs(6),
  });

  assert.equal(prompts.length, 4);
  const stale = toolResult(prompts[2], "commit-1");
  assert.equal(stale.type, "json", "a stale commit is a tool result, not a tool error");
  assert.equal(stale.value.stale, true);
  assert.equal(stale.value.committed, false);
  assert.equal(stale.value.currentVersion, 2);
  assert.deepEqual(stale.value.currentValue, { engine: "dynamodb", votes: 2 });
  assert.deepEqual(toolResult(prompts[3], "commit-2").value, { ok: true, committed: true, shardId: "db_choice", version: 3 });
  assert.equal(result.text, "Committed on top of the winning value.");
  const shard = await agent.getShard("db_choice");
  assert.equal(shard.version, 3);
  assert.deepEqual(shard.value, { engine: "dynamodb", votes: 3 });
});

test("claimTask takes any pending task, then reports that none is left", async () => {
  const agent = new ZeroLockClient(server.url, { apiKey: server.keys.admin, agentId: "llm-worker" });
  await agent.createShard("jobs", { initialValue: { only: { status: "pending", what: "summarise" } } });
  /** @type {any[]} */
  const prompts = [];
  const model = new MockLanguageModelV4({
    doGenerate: async (/** @type {any} */ options) => {
      prompts.push(options.prompt);
      if (prompts.length === 1) return callTool("claimTask", { queueShardId: "jobs" }, "c1");
      if (prompts.length === 2) return callTool("claimTask", { queueShardId: "jobs" }, "c2");
      if (prompts.length === 3) return callTool("claimTask", { queueShardId: "jobs", taskId: "only" }, "c3");
      return say("done");
    },
  });
  await generateText({ model, tools: createZeroLockTools(agent), prompt: "Take work.", stopWhen: stepCountIs(5) });
  const first = toolResult(prompts[1], "c1").value;
  assert.equal(first.claimed, true);
  assert.equal(first.taskId, "only");
  assert.deepEqual(first.task, { status: "claimed", what: "summarise", holder: "llm-worker" });
  assert.deepEqual(toolResult(prompts[2], "c2").value, { ok: true, claimed: false, taskId: null, holder: null });
  const named = toolResult(prompts[3], "c3").value;
  assert.equal(named.claimed, false, "a claimed task is not pending any more");
  assert.equal(named.holder, "llm-worker");
});

test("with approvals: an irreversible shard's refusal points the model to requestApproval, whose decision checkApproval reports", async () => {
  const agent = new ZeroLockClient(server.url, { apiKey: server.keys.admin, agentId: "llm-deployer" });
  const officer = new ZeroLockClient(server.url, { apiKey: server.keys.officer, agentId: "officer" });
  await agent.createShard("prod", { initialValue: { release: "v1" }, reversible: false });
  const tools = createZeroLockTools(agent, { approvals: true });
  assert.deepEqual(Object.keys(tools).sort(), ["checkApproval", "claimTask", "commitShard", "readShard", "requestApproval"]);
  assert.deepEqual(Object.keys(createZeroLockTools(agent)).sort(), ["claimTask", "commitShard", "readShard"]);
  /** @type {any[]} */
  const prompts = [];
  const model = new MockLanguageModelV4({
    doGenerate: async (/** @type {any} */ options) => {
      prompts.push(options.prompt);
      switch (prompts.length) {
        case 1:
          return callTool("commitShard", { shardId: "prod", newValue: { release: "v2" }, expectedVersion: 1 }, "a1");
        case 2:
          return callTool("requestApproval", { shardId: "prod", proposedValue: { release: "v2" }, expectedVersion: 1, description: "ship v2" }, "a2");
        case 3: {
          const { approvalId } = toolResult(options.prompt, "a2").value;
          await officer.approve(approvalId, "go");
          return callTool("checkApproval", { approvalId }, "a3");
        }
        default:
          return say("shipped");
      }
    },
  });
  await generateText({ model, tools, prompt: "Ship v2.", stopWhen: stepCountIs(6) });
  const refused = toolResult(prompts[1], "a1").value;
  assert.equal(refused.error, "APPROVAL_REQUIRED");
  assert.match(refused.hint, /requestApproval/);
  assert.equal(toolResult(prompts[2], "a2").value.status, "pending");
  const checked = toolResult(prompts[3], "a3").value;
  assert.equal(checked.status, "committed");
  assert.equal(checked.commit.version, 2);
  assert.deepEqual((await agent.getShard("prod")).value, { release: "v2" });
});
