"""The LangGraph adapter: a graph checkpointed in shards resumes where it was."""

from __future__ import annotations

import asyncio
import json
import operator
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from access.services import api_key_create
from audit.models import AuditEntry
from zerolock_sdk import CreateShardOptions, ZeroLockClient
from zerolock_sdk.langgraph import ZeroLockSaver, create_zerolock_tools, thread_shard_id

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def graph(saver: ZeroLockSaver):
    builder = StateGraph(State)
    builder.add_node("plan", lambda state: {"steps": ["plan"]})
    builder.add_node("act", lambda state: {"steps": ["act"]})
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=saver)


def test_a_graph_checkpointed_in_shards_accumulates_across_runs_and_workers(live_server_url):
    _, key = api_key_create(name="graph", permissions=["shard:read", "shard:write", "shard:create"])
    config = {"configurable": {"thread_id": "thread/42"}}
    first = graph(ZeroLockSaver(live_server_url, api_key=key, agent_id="worker-1"))
    assert first.invoke({"steps": ["start"]}, config)["steps"] == ["start", "plan", "act"]
    # Another worker process would build its own saver: the thread continues.
    second = graph(ZeroLockSaver(live_server_url, api_key=key, agent_id="worker-2"))
    result = asyncio.run(second.ainvoke({"steps": ["again"]}, config))
    assert result["steps"] == ["start", "plan", "act", "again", "plan", "act"]
    history = list(second.get_state_history(config))
    assert len(history) >= 8
    assert history[0].values["steps"][-1] == "act"
    shard_id = thread_shard_id("thread/42", "")
    writers = set(AuditEntry.objects.filter(shard_id=shard_id).values_list("agent_id", flat=True))
    assert writers == {"worker-1", "worker-2"}


def test_the_tools_read_commit_and_claim(live_server_url):
    _, key = api_key_create(name="tools", permissions=["shard:read", "shard:write", "shard:create"])

    async def scenario() -> tuple[dict, dict, dict, dict, dict, dict]:
        async with ZeroLockClient(live_server_url, agent_id="llm-agent", api_key=key) as zl:
            await zl.create_shard("notes", CreateShardOptions(initial_value={"n": 1}))
            await zl.create_shard(
                "jobs",
                CreateShardOptions(
                    initial_value={"j1": {"status": "pending"}, "j2": {"status": "pending"}}
                ),
            )
            tools = {tool.name: tool for tool in create_zerolock_tools(zl)}
            read = json.loads(await tools["read_shard"].ainvoke({"shard_id": "notes"}))
            ok = json.loads(
                await tools["commit_shard"].ainvoke(
                    {"shard_id": "notes", "expected_version": 1, "new_value_json": '{"n": 2}'}
                )
            )
            stale = json.loads(
                await tools["commit_shard"].ainvoke(
                    {"shard_id": "notes", "expected_version": 1, "new_value_json": '{"n": 3}'}
                )
            )
            claimed = json.loads(
                await tools["claim_task"].ainvoke({"shard_id": "jobs", "task_id": "j1"})
            )
            # No task_id: the server picks a pending one, until none is left.
            picked = json.loads(await tools["claim_task"].ainvoke({"shard_id": "jobs"}))
            none_left = json.loads(await tools["claim_task"].ainvoke({"shard_id": "jobs"}))
            return read, ok, stale, claimed, picked, none_left

    read, ok, stale, claimed, picked, none_left = asyncio.run(scenario())
    assert read == {"shard_id": "notes", "version": 1, "value": {"n": 1}}
    assert ok == {"committed": True, "version": 2}
    assert stale["committed"] is False and stale["current_value"] == {"n": 2}
    assert claimed == {"task_id": "j1", "claimed": True, "holder": "llm-agent"}
    assert picked == {
        "task_id": "j2",
        "claimed": True,
        "holder": "llm-agent",
        "task": {"status": "claimed", "holder": "llm-agent"},
    }
    assert none_left == {"task_id": None, "claimed": False, "holder": None}
