// Three tool-calling agents share a task queue and a summary through ZeroLock's
// Vercel AI SDK tools. Each runs a real generateText loop; the model is the AI
// SDK's mock, scripted to act as an LLM would on the tools' results, so this
// runs with no API key. Swap in any AI SDK model (openai("gpt-..."), ...).
//
//   ZEROLOCK_URL=http://127.0.0.1:8000 ZEROLOCK_API_KEY=zl_... node main.mjs
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { ZeroLockClient } from "zerolock";
import { createZeroLockTools } from "zerolock/ai";

const run = Date.now().toString(36); // fresh shard ids on every run
const QUEUE = `demo.${run}.tasks`;
const SUMMARY = `demo.${run}.summary`;
const TASKS = 9;

const admin = new ZeroLockClient(process.env.ZEROLOCK_URL, { agentId: "demo-admin" });
await admin.createShard(QUEUE, {
  initialValue: Object.fromEntries(Array.from({ length: TASKS }, (_, i) => [`task-${i}`, { status: "pending" }])),
});
await admin.createShard(SUMMARY, { initialValue: [] });

const usage = {
  inputTokens: { total: 0, noCache: 0, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 0, text: 0, reasoning: undefined },
};
let calls = 0;
const callTool = (toolName, input) => ({
  content: [{ type: "tool-call", toolCallId: `call-${++calls}`, toolName, input: JSON.stringify(input) }],
  finishReason: { unified: "tool-calls", raw: undefined },
  usage,
  warnings: [],
});
const say = (text) => ({ content: [{ type: "text", text }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] });

/** What the model does next, given the last tool result it was shown. */
function nextMove(agentId, prompt, memory) {
  const last = prompt.at(-1);
  const part = last?.role === "tool" ? last.content.at(-1) : undefined;
  if (!part) return callTool("claimTask", { queueShardId: QUEUE });
  const result = part.output.value;
  switch (part.toolName) {
    case "claimTask":
      if (!result.claimed) return say(`${agentId}: no work left.`);
      memory.task = result.taskId;
      return callTool("readShard", { shardId: SUMMARY });
    case "readShard":
      return callTool("commitShard", {
        shardId: SUMMARY,
        newValue: [...result.value, `${memory.task} done by ${agentId}`],
        expectedVersion: result.version,
      });
    case "commitShard":
      if (result.stale) {
        // Another agent wrote first: the tool result carries what won; build on it.
        memory.stale++;
        return callTool("commitShard", {
          shardId: SUMMARY,
          newValue: [...result.currentValue, `${memory.task} done by ${agentId}`],
          expectedVersion: result.currentVersion,
        });
      }
      return callTool("claimTask", { queueShardId: QUEUE });
    default:
      return say("unexpected tool");
  }
}

async function agent(agentId) {
  const client = new ZeroLockClient(process.env.ZEROLOCK_URL, { agentId });
  const memory = { task: null, stale: 0 };
  const model = new MockLanguageModelV4({ doGenerate: async ({ prompt }) => nextMove(agentId, prompt, memory) });
  const { text } = await generateText({
    model,
    tools: createZeroLockTools(client),
    system: "Claim tasks from the queue and record each one in the shared summary.",
    prompt: "Work until the queue is empty.",
    stopWhen: stepCountIs(100),
  });
  return { agentId, text, stale: memory.stale };
}

const results = await Promise.all(["agent-a", "agent-b", "agent-c"].map(agent));
const summary = (await admin.getShard(SUMMARY)).value;
const recorded = new Set(summary.map((line) => line.split(" ")[0]));
for (const r of results) console.log(`${r.text} (stale commits answered with the winning value: ${r.stale})`);
console.log(`summary: ${summary.length} lines for ${TASKS} tasks, ${recorded.size} distinct`);
if (summary.length !== TASKS || recorded.size !== TASKS) {
  console.error("a task was lost or recorded twice");
  process.exit(1);
}
