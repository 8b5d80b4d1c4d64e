"""The LangGraph adapter against a live server: a graph checkpointed in shards
resumes where it was, stores what each step made (not the thread again), and
pauses on a ZeroLock approval that the decision resumes."""

from __future__ import annotations

import asyncio
import base64
import json
import operator
import os
import re
import subprocess
import sys
from typing import Annotated, Any, TypedDict

import pytest
from django.db.models import Sum, TextField
from django.db.models.functions import Cast, Length
from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from access.services import api_key_create
from approvals.models import Approval as ApprovalRow
from audit.models import AuditEntry
from shards.models import Shard
from tests.conftest import ROOT
from zerolock_sdk import CreateShardOptions, ZeroLockClient
from zerolock_sdk.approvals import ApprovalClient
from zerolock_sdk.langgraph import (
    ZeroLockSaver,
    approval_interrupt,
    create_zerolock_tools,
    legacy_thread_shard_id,
    namespace_prefix,
    pending_approvals,
    resume_when_decided,
    thread_prefix,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

SAVER = ["shard:read", "shard:write", "shard:create"]


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


class Counter(TypedDict, total=False):
    n: int
    note: str


def counter_graph(saver: ZeroLockSaver):
    """One step per invoke (``{"note": ...}`` as the input): the state stays the
    same size however long the thread."""
    builder = StateGraph(Counter)
    builder.add_node("step", lambda state: {"n": state.get("n", 0) + 1, "note": "x" * 200})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def audit_bytes(prefix: str, after: int = 0) -> tuple[int, int]:
    """(entries, bytes of their stored values) the audit holds for these shards."""
    rows = AuditEntry.objects.filter(shard_id__startswith=prefix, id__gt=after)
    # As text: PostgreSQL has no length() of jsonb.
    size = Length(Cast("value", TextField()))
    total = rows.annotate(size=size).aggregate(Sum("size"))["size__sum"] or 0
    return rows.count(), total


def last_audit_id() -> int:
    return AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0


def test_a_graph_checkpointed_in_shards_accumulates_across_runs_and_workers(live_server_url):
    _, key = api_key_create(name="graph", permissions=SAVER)
    config = {"configurable": {"thread_id": "thread/42"}}
    first = graph(ZeroLockSaver(live_server_url, api_key=key, agent_id="worker-1"))
    assert first.invoke({"steps": ["start"]}, config)["steps"] == ["start", "plan", "act"]
    # Another worker process would build its own saver: the thread continues.
    second = graph(ZeroLockSaver(live_server_url, api_key=key, agent_id="worker-2"))
    result = asyncio.run(second.ainvoke({"steps": ["again"]}, config))
    assert result["steps"] == ["start", "plan", "act", "again", "plan", "act"]
    history = list(second.get_state_history(config))
    assert len(history) == 8
    assert history[0].values["steps"][-1] == "act"
    assert [h.values["steps"] for h in history[-2:]] == [["start"], []]
    # An older checkpoint is read by its id, with its writes.
    older = second.get_state(history[3].config)
    assert older.values == history[3].values and older.next == history[3].next
    assert len(list(second.get_state_history(config, limit=3))) == 3
    prefix = thread_prefix("thread/42")
    writers = set(
        AuditEntry.objects.filter(shard_id__startswith=prefix).values_list("agent_id", flat=True)
    )
    assert writers == {"worker-1", "worker-2"}


def test_a_step_stores_what_it_made_not_the_thread_again(live_server_url):
    """The audit keeps every version's whole value: with a shard per checkpoint, the
    bytes a step adds are the same at step 40 as at step 5 (the 0.x layout's grew
    with the thread)."""
    _, key = api_key_create(name="flat", permissions=SAVER)
    saver = ZeroLockSaver(live_server_url, api_key=key, agent_id="stepper")
    app = counter_graph(saver)
    config = {"configurable": {"thread_id": "long"}}
    per_step: list[tuple[int, int, int]] = []
    for _ in range(40):
        before, sent = last_audit_id(), saver.requests_sent
        app.invoke({"note": "go"}, config)
        entries, size = audit_bytes(thread_prefix("long"), before)
        per_step.append((entries, size, saver.requests_sent - sent))
    assert app.get_state(config).values["n"] == 40
    early, late = per_step[2:7], per_step[-5:]
    assert len({e for e, _, _ in early + late}) == 1  # as many entries per step
    assert max(s for _, s, _ in late) <= 1.05 * max(s for _, s, _ in early)
    # One listing read, then one create per checkpoint and per writes: no
    # request that is made to fail (the 0.x saver sent a create that got 409
    # before every write).
    assert {r for _, _, r in early + late} == {late[0][0] + 1}


def test_deleting_a_thread_deletes_its_shards_and_leaves_other_threads(live_server_url):
    _, key = api_key_create(name="deleter", permissions=[*SAVER, "admin"])
    saver = ZeroLockSaver(live_server_url, api_key=key, agent_id="deleter")
    app = counter_graph(saver)
    for thread in ("gone", "kept"):
        for _ in range(3):
            app.invoke({"note": "go"}, {"configurable": {"thread_id": thread}})
    gone, kept = thread_prefix("gone"), thread_prefix("kept")
    # Per invoke: three checkpoints (input, after the input, after the step), two
    # with writes.
    assert Shard.objects.filter(id__startswith=gone).count() == 15
    saver.delete_thread("gone")
    assert not Shard.objects.filter(id__startswith=gone).exists()
    assert Shard.objects.filter(id__startswith=kept).count() == 15
    assert app.get_state({"configurable": {"thread_id": "gone"}}).values == {}
    assert app.get_state({"configurable": {"thread_id": "kept"}}).values["n"] == 3


def legacy_value(saver: ZeroLockSaver, thread_id: str, tuples: list[Any]) -> dict[str, Any]:
    """A thread as the 0.x saver stored it (its docstring's layout), from the
    checkpoints of another saver."""
    checkpoints, writes = {}, {}
    for t in tuples:
        cid = t.config["configurable"]["checkpoint_id"]
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        checkpoints[cid] = {
            "checkpoint": list_pack(saver, t.checkpoint),
            "metadata": list_pack(saver, t.metadata),
            "parent": parent,
        }
        per_task: dict[str, int] = {}
        for task_id, channel, value in t.pending_writes or []:
            index = per_task[task_id] = per_task.get(task_id, -1) + 1
            idx = WRITES_IDX_MAP.get(channel, index)
            packed = list_pack(saver, value)
            writes.setdefault(cid, {})[f"{task_id}:{idx}"] = [task_id, channel, *packed, ""]
    return {
        "thread_id": thread_id,
        "checkpoint_ns": "",
        "checkpoints": checkpoints,
        "writes": writes,
    }


def list_pack(saver: ZeroLockSaver, value: Any) -> list[str]:
    kind, data = saver.serde.dumps_typed(value)
    return [kind, base64.b64encode(data).decode()]


def test_a_thread_of_the_old_layout_is_migrated_and_continues(live_server_url):
    _, key = api_key_create(name="migrator", permissions=[*SAVER, "admin"])
    saver = ZeroLockSaver(live_server_url, api_key=key, agent_id="migrator")
    memory = InMemorySaver()
    config = {"configurable": {"thread_id": "old-thread"}}
    before = counter_graph(memory)
    for _ in range(3):
        before.invoke({"note": "go"}, config)
    tuples = list(memory.list(config))
    legacy = legacy_thread_shard_id("old-thread", "")

    async def seed() -> None:
        async with ZeroLockClient(live_server_url, agent_id="old", api_key=key) as zl:
            value = legacy_value(saver, "old-thread", tuples)
            await zl.create_shard(legacy, CreateShardOptions(initial_value=value))

    asyncio.run(seed())
    app = counter_graph(saver)
    assert app.get_state(config).values == {}  # not read as it was
    assert saver.migrate_legacy_thread("old-thread") == len(tuples) == 9
    assert saver.migrate_legacy_thread("old-thread", delete=True) == 0  # nothing missing
    assert not Shard.objects.filter(pk=legacy).exists()
    history = list(app.get_state_history(config))
    assert [h.values for h in history] == [h.values for h in before.get_state_history(config)]
    assert [h.next for h in history] == [h.next for h in before.get_state_history(config)]
    app.invoke({"note": "go"}, config)
    assert app.get_state(config).values["n"] == 4


def test_concurrent_writers_of_one_checkpoint_lose_no_write(live_server_url):
    """Eight savers (eight workers) put 25 tasks' writes each on one checkpoint at
    once: every write is there, once."""
    _, key = api_key_create(name="racers", permissions=SAVER)
    first = ZeroLockSaver(live_server_url, api_key=key, agent_id="w0")
    app = counter_graph(first)
    config = {"configurable": {"thread_id": "raced"}}
    app.invoke({"note": "go"}, config)
    target = first.get_tuple(config).config

    async def writer(number: int) -> None:
        saver = ZeroLockSaver(live_server_url, api_key=key, agent_id=f"w{number}")
        await asyncio.gather(
            *(
                saver.aput_writes(target, [("n", number * 100 + task)], f"task-{number}-{task}")
                for task in range(25)
            )
        )

    async def race() -> None:
        await asyncio.gather(*(writer(number) for number in range(8)))

    asyncio.run(race())
    pending = first.get_tuple(target).pending_writes
    got = sorted(value for _, channel, value in pending if channel == "n")
    wanted = sorted(n * 100 + t for n in range(8) for t in range(25))
    lost, duplicated = set(wanted) - set(got), len(got) - len(set(got))
    assert (lost, duplicated) == (set(), 0)
    assert len(got) == 200


# --- the approval bridge -------------------------------------------------------------


class Limits(TypedDict, total=False):
    wanted: int
    outcome: str
    version: int | None
    reason: str


def approval_graph(saver: ZeroLockSaver, zl: ZeroLockClient, runs: list[str]):
    async def raise_limit(state: Limits) -> dict[str, Any]:
        runs.append("raise_limit")
        approval = await approval_interrupt(
            zl, "prod:limits", {"max": state["wanted"]}, 1, "raise the limit for the launch"
        )
        return {
            "outcome": approval.status,
            "version": (approval.commit or {}).get("version"),
            "reason": approval.reason,
        }

    builder = StateGraph(Limits)
    builder.add_node("raise_limit", raise_limit)
    builder.add_edge(START, "raise_limit")
    builder.add_edge("raise_limit", END)
    return builder.compile(checkpointer=saver)


def approval_keys() -> tuple[str, str]:
    _, agent = api_key_create(name="ops", permissions=[*SAVER, "approval:request"])
    _, officer = api_key_create(name="officer", permissions=["approval:decide", "shard:read"])
    return agent, officer


async def decide_soon(url: str, officer_key: str, approval_id: str, approve: bool) -> None:
    await asyncio.sleep(0.3)  # the resumer is waiting by then
    async with ZeroLockClient(url, agent_id="risk-officer", api_key=officer_key) as officer:
        if approve:
            await officer.approve(approval_id, "ok for the launch")
        else:
            await officer.reject(approval_id, "not this week")


def test_an_approved_interrupt_resumes_the_graph_and_the_change_is_committed_once(
    live_server_url,
):
    agent_key, officer_key = approval_keys()
    saver = ZeroLockSaver(live_server_url, api_key=agent_key, agent_id="ops-1")
    config = {"configurable": {"thread_id": "launch"}}
    runs: list[str] = []

    async def scenario() -> dict[str, Any]:
        async with (
            ZeroLockClient(live_server_url, agent_id="ops-1", api_key=agent_key) as zl,
            ApprovalClient(live_server_url, agent_id="ops-1", api_key=agent_key) as waiter,
        ):
            await zl.create_shard(
                "prod:limits", CreateShardOptions(initial_value={"max": 3}, reversible=False)
            )
            app = approval_graph(saver, zl, runs)
            paused = await app.ainvoke({"wanted": 9}, config)
            assert "__interrupt__" in paused
            waiting = pending_approvals(await app.aget_state(config))
            (approval_id,) = waiting.values()
            assert (await zl.get_shard("prod:limits")).version == 1  # nothing yet
            decision = asyncio.create_task(
                decide_soon(live_server_url, officer_key, approval_id, approve=True)
            )
            done = await resume_when_decided(app, config, waiter, timeout_seconds=20)
            await decision
            # Resuming again finds nothing paused; a stray resume runs nothing.
            assert await resume_when_decided(app, config, waiter, timeout_seconds=5) is None
            await app.ainvoke(Command(resume={"anything": True}), config)
            return {"done": done, "approval_id": approval_id}

    out = asyncio.run(scenario())
    assert out["done"]["outcome"] == "approved" and out["done"]["version"] == 2
    shard = Shard.objects.get(pk="prod:limits")
    assert (shard.version, shard.value) == (2, {"max": 9})
    commits = AuditEntry.objects.filter(shard_id="prod:limits", action="shard.commit")
    assert commits.count() == 1
    assert ApprovalRow.objects.filter(shard_id="prod:limits").count() == 1
    assert ApprovalRow.objects.get().status == "committed"
    assert runs == ["raise_limit", "raise_limit"]  # paused once, run again on resume


def test_a_rejected_interrupt_resumes_the_graph_and_nothing_is_committed(live_server_url):
    agent_key, officer_key = approval_keys()
    saver = ZeroLockSaver(live_server_url, api_key=agent_key, agent_id="ops-1")
    config = {"configurable": {"thread_id": "launch-rejected"}}

    async def scenario() -> dict[str, Any]:
        async with (
            ZeroLockClient(live_server_url, agent_id="ops-1", api_key=agent_key) as zl,
            ApprovalClient(live_server_url, agent_id="ops-1", api_key=agent_key) as waiter,
        ):
            await zl.create_shard(
                "prod:limits", CreateShardOptions(initial_value={"max": 3}, reversible=False)
            )
            app = approval_graph(saver, zl, [])
            await app.ainvoke({"wanted": 50}, config)
            (approval_id,) = pending_approvals(await app.aget_state(config)).values()
            decision = asyncio.create_task(
                decide_soon(live_server_url, officer_key, approval_id, approve=False)
            )
            done = await resume_when_decided(app, config, waiter, timeout_seconds=20)
            await decision
            return done

    done = asyncio.run(scenario())
    assert done["outcome"] == "rejected" and done["reason"] == "not this week"
    assert done["version"] is None
    shard = Shard.objects.get(pk="prod:limits")
    assert (shard.version, shard.value) == (1, {"max": 3})
    assert not AuditEntry.objects.filter(shard_id="prod:limits", action="shard.commit").exists()


def test_replaying_the_approving_node_asks_once_and_commits_once(live_server_url):
    """The node run again from the checkpoint before it (time travel, or a worker
    that replays) finds the same approval, already applied: no second request, no
    second commit, and no pause."""
    agent_key, officer_key = approval_keys()
    saver = ZeroLockSaver(live_server_url, api_key=agent_key, agent_id="ops-1")
    config = {"configurable": {"thread_id": "launch-replayed"}}
    runs: list[str] = []

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with (
            ZeroLockClient(live_server_url, agent_id="ops-1", api_key=agent_key) as zl,
            ApprovalClient(live_server_url, agent_id="ops-1", api_key=agent_key) as waiter,
        ):
            await zl.create_shard(
                "prod:limits", CreateShardOptions(initial_value={"max": 3}, reversible=False)
            )
            app = approval_graph(saver, zl, runs)
            await app.ainvoke({"wanted": 9}, config)
            (approval_id,) = pending_approvals(await app.aget_state(config)).values()
            decision = asyncio.create_task(
                decide_soon(live_server_url, officer_key, approval_id, approve=True)
            )
            done = await resume_when_decided(app, config, waiter, timeout_seconds=20)
            await decision
            history = [s async for s in app.aget_state_history(config)]
            before_node = next(s for s in history if s.next == ("raise_limit",))
            replayed = await app.ainvoke(None, before_node.config)
            return done, replayed

    done, replayed = asyncio.run(scenario())
    assert done["outcome"] == replayed["outcome"] == "approved"
    assert done["version"] == replayed["version"] == 2
    assert "__interrupt__" not in replayed
    assert runs == ["raise_limit"] * 3
    assert ApprovalRow.objects.filter(shard_id="prod:limits").count() == 1
    assert AuditEntry.objects.filter(shard_id="prod:limits", action="shard.commit").count() == 1
    assert Shard.objects.get(pk="prod:limits").version == 2
    assert AuditEntry.objects.filter(action="approval.requested").count() == 1


def test_the_example_pauses_resumes_on_approval_and_commits_once(live_server_url):
    agent_key, officer_key = approval_keys()
    base = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLOCK_")}
    env = {
        **base,
        "ZEROLOCK_URL": live_server_url,
        "ZEROLOCK_API_KEY": agent_key,
        "ZEROLOCK_APPROVER_KEY": officer_key,
    }
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langgraph" / "main.py"), "--auto-approve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r'^paused on: \{.*"zerolock_approval": "apr_\w+"\}$', out, re.M)
    assert "resumed: approved at version 2" in out
    assert "replayed: approved at version 2" in out
    assert "commits of the shard: 1, node runs: 3" in out
    assert '"version": 2, "value": {"max": 9}' in out
    assert ApprovalRow.objects.get().status == "committed"


def test_the_tools_read_commit_and_claim(live_server_url):
    _, key = api_key_create(name="tools", permissions=SAVER)

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


def test_the_tools_are_async_only_and_say_so_when_called_sync(live_server_url):
    """The guide says the tools are coroutines: ``invoke`` (sync) refuses them."""
    _, key = api_key_create(name="sync tools", permissions=SAVER)

    async def tools() -> list[Any]:
        async with ZeroLockClient(live_server_url, agent_id="a", api_key=key) as zl:
            return create_zerolock_tools(zl)

    read = asyncio.run(tools())[0]
    with pytest.raises(NotImplementedError):
        read.invoke({"shard_id": "notes"})


def test_the_namespace_prefix_lies_inside_the_thread_prefix():
    assert namespace_prefix("t", "").startswith(thread_prefix("t"))
    assert namespace_prefix("t", "sub:1") != namespace_prefix("t", "")
