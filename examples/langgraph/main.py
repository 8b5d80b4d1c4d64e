"""A LangGraph graph that raises a production limit only with a person's approval.

The graph is checkpointed in ZeroLock (ZeroLockSaver). Its ``apply`` node asks
for an approval and pauses (LangGraph ``interrupt()``); the decision, in the
console or by a second key, resumes it (``Command(resume=...)``). ZeroLock
applies the approved change once; the node, run again on resume and replayed
afterwards, never applies it twice.

    export ZEROLOCK_URL=http://127.0.0.1:8000 ZEROLOCK_API_KEY=zl_...
    python examples/langgraph/main.py                  # approve it at /console/
    ZEROLOCK_APPROVER_KEY=zl_... python examples/langgraph/main.py --auto-approve
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from zerolock_sdk import CreateShardOptions, ZeroLockClient
from zerolock_sdk.approvals import ApprovalClient
from zerolock_sdk.langgraph import (
    ZeroLockSaver,
    approval_interrupt,
    create_zerolock_tools,
    pending_approvals,
    resume_when_decided,
)

URL = os.environ.get("ZEROLOCK_URL", "http://127.0.0.1:8000")
AGENT = "ops-agent"


class Plan(TypedDict, total=False):
    shard_id: str
    version: int
    wanted: int
    outcome: str
    committed_version: int | None


def build(saver: ZeroLockSaver, zl: ZeroLockClient, runs: list[str]) -> Any:
    async def plan(state: Plan) -> dict[str, Any]:
        # The read is its own step, recorded in the checkpoint: the approving node
        # proposes from the state, so its re-runs propose the same change.
        shard = await zl.get_shard(state["shard_id"])
        return {"version": shard.version, "wanted": shard.value["max"] * 3}

    async def apply(state: Plan) -> dict[str, Any]:
        runs.append("apply")
        approval = await approval_interrupt(
            zl,
            state["shard_id"],
            {"max": state["wanted"]},
            state["version"],
            f"raise the launch limit to {state['wanted']}",
        )
        return {
            "outcome": approval.status,
            "committed_version": (approval.commit or {}).get("version"),
        }

    builder = StateGraph(Plan)
    builder.add_node("plan", plan)
    builder.add_node("apply", apply)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "apply")
    builder.add_edge("apply", END)
    return builder.compile(checkpointer=saver)


async def approve_as_second_key(approval_id: str) -> None:
    await asyncio.sleep(0.5)  # the graph's resumer is waiting by then
    async with ZeroLockClient(
        URL, agent_id="risk-officer", api_key=os.environ["ZEROLOCK_APPROVER_KEY"]
    ) as officer:
        await officer.approve(approval_id, "fine for the launch")


async def main(auto_approve: bool, timeout: float) -> None:
    if auto_approve and not os.environ.get("ZEROLOCK_APPROVER_KEY"):
        raise SystemExit(
            "--auto-approve needs ZEROLOCK_APPROVER_KEY: a second key that may decide, e.g. "
            "`manage.py createapikey approver --permissions approval:decide`"
        )
    key = os.environ["ZEROLOCK_API_KEY"]
    shard_id = f"prod:limits.{uuid.uuid4().hex[:8]}"
    saver = ZeroLockSaver(URL, api_key=key, agent_id=AGENT)
    config = {"configurable": {"thread_id": f"launch-{shard_id}"}}
    runs: list[str] = []
    async with (
        ZeroLockClient(URL, agent_id=AGENT, api_key=key) as zl,
        ApprovalClient(URL, agent_id=AGENT, api_key=key) as approvals,
    ):
        await zl.create_shard(
            shard_id, CreateShardOptions(initial_value={"max": 3}, reversible=False)
        )
        graph = build(saver, zl, runs)
        paused = await graph.ainvoke({"shard_id": shard_id}, config)
        (interrupt_value,) = [pause.value for pause in paused["__interrupt__"]]
        print("paused on:", json.dumps(interrupt_value, sort_keys=True))
        (approval_id,) = pending_approvals(await graph.aget_state(config)).values()
        decider = asyncio.create_task(approve_as_second_key(approval_id)) if auto_approve else None
        if decider is None:
            print(f"waiting for a decision on {approval_id} at {URL}/console/ ...")
        done = await resume_when_decided(graph, config, approvals, timeout_seconds=timeout)
        if decider is not None:
            await decider
        print("resumed:", done["outcome"], "at version", done["committed_version"])
        # Replaying the approving node (time travel) finds the same approval.
        history = [s async for s in graph.aget_state_history(config)]
        before = next(s for s in history if s.next == ("apply",))
        again = await graph.ainvoke(None, before.config)
        print("replayed:", again["outcome"], "at version", again["committed_version"])
        versions = await zl.history(shard_id)
        commits = [v for v in versions if v["action"] == "shard.commit"]
        print(f"commits of the shard: {len(commits)}, node runs: {len(runs)}")
        read_shard = create_zerolock_tools(zl)[0]  # the tools are async: ainvoke
        print("read_shard tool:", await read_shard.ainvoke({"shard_id": shard_id}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--auto-approve", action="store_true")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    asyncio.run(main(args.auto_approve, args.timeout))
