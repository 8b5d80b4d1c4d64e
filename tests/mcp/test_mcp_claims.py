"""Twenty agents, each in its own MCP session on the live server, claim forty
tasks of one queue with ``task_claim`` until each is told NOTHING_TO_CLAIM.

Every task is claimed exactly once, by the agent whose answer says so, and
every NOTHING_TO_CLAIM was decided after the fortieth claim was committed. The
ordering is shown from the server's own evidence, not from client clocks: a
claim reads the queue under the write lock and writes one new version, and a
NOTHING_TO_CLAIM names the version it read there (``details.version``;
coordination/claims.py, docs/api.md). Only claims write this queue, so the
forty claims are versions v0+1..v0+40 (each one task more, the shard's history
and audit log agree), and a NOTHING_TO_CLAIM that read v0+40 was decided when
all forty were already committed; one decided on anything older would name a
version below it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from access.identity import Actor
from access.services import api_key_create
from audit.models import AuditEntry
from shards.models import Shard
from shards.services import shard_create
from tests.mcp.helpers import answer_of, error_of, mcp_session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

AGENTS = [f"agent-{n:02d}" for n in range(20)]
TASKS = {f"t{n:02d}": {"status": "pending", "n": n} for n in range(40)}
# Tasks `where` must not match: a claim that ignored it would take one.
DECOYS = {f"done-{n}": {"status": "done", "holder": "alice"} for n in range(4)}
QUEUE = "mcp-queue"
CLAIM = {"shard_id": QUEUE, "where": {"status": "pending"}, "set": {"status": "claimed"}}
DEADLINE_SECONDS = float(os.environ.get("MCP_CLAIMS_DEADLINE", "30"))


@dataclass(frozen=True)
class Answer:
    agent: str
    sent: float
    received: float
    status: int
    data: dict[str, Any]  # a claim's answer, or a refusal's error object

    @property
    def claimed(self) -> bool:
        return self.status == 200


async def claim_until_nothing(
    url: str, key: str, agent: str, opened: list[str], go: asyncio.Event
) -> list[Answer]:
    answers: list[Answer] = []
    async with mcp_session(url, key, agent) as client:
        opened.append(agent)
        if len(opened) == len(AGENTS):
            go.set()  # every session is open: start together
        await go.wait()
        while len(answers) <= len(TASKS):  # more would mean a claim that never ends
            sent = time.monotonic()
            result = await client.call_tool("task_claim", CLAIM)
            received = time.monotonic()
            status = result.meta["zerolock/status"]
            if result.is_error:
                answers.append(Answer(agent, sent, received, status, error_of(result)))
                break
            answers.append(Answer(agent, sent, received, status, answer_of(result)))
    return answers


def most_in_flight(answers: list[Answer]) -> int:
    edges = sorted([(a.sent, 1) for a in answers] + [(a.received, -1) for a in answers])
    level = top = 0
    for _, step in edges:
        level += step
        top = max(top, level)
    return top


@pytest.fixture
def queue_key(live_server_url: str) -> str:
    _, raw = api_key_create(name="workers", permissions=["shard:read", "shard:write"])
    shard_create(
        actor=Actor("alice"),
        shard_id=QUEUE,
        shard_type="decision",
        initial_value=TASKS | DECOYS,
    )
    return raw


async def test_twenty_sessions_claim_forty_tasks_each_exactly_once_and_hear_nothing_only_after_the_last(
    live_server_url: str, queue_key: str
) -> None:
    v0 = (await sync_to_async(Shard.objects.get)(pk=QUEUE)).version
    opened: list[str] = []
    go = asyncio.Event()
    started = time.monotonic()
    per_agent = await asyncio.wait_for(
        asyncio.gather(
            *(claim_until_nothing(live_server_url, queue_key, a, opened, go) for a in AGENTS)
        ),
        timeout=DEADLINE_SECONDS,
    )
    took = time.monotonic() - started
    answers = [a for agent_answers in per_agent for a in agent_answers]
    racing = max(a.received for a in answers) - min(a.sent for a in answers)
    claims = [a for a in answers if a.claimed]
    nothing = [a for a in answers if not a.claimed]

    # Every answer is a claim (200) or NOTHING_TO_CLAIM (404): no other refusal.
    assert all(a.status == 200 for a in claims)
    assert {(a.status, a.data["code"]) for a in nothing} == {(404, "NOTHING_TO_CLAIM")}, nothing

    # Forty claims, forty distinct tasks, each the pending ones: none twice, none lost.
    taken = [a.data["task_id"] for a in claims]
    assert len(taken) == len(TASKS), Counter(taken)
    assert sorted(taken) == sorted(TASKS)
    by_task = {a.data["task_id"]: a for a in claims}
    for task_id, answer in by_task.items():
        assert answer.data["task"] == TASKS[task_id] | {"status": "claimed", "holder": answer.agent}

    # Each claim wrote one version: v0+1..v0+40, one each, and the value written at
    # version v holds exactly v - v0 claimed tasks (one more than the version before).
    by_version = {a.data["version"]: a for a in claims}
    assert sorted(by_version) == list(range(v0 + 1, v0 + len(TASKS) + 1))
    for version, answer in by_version.items():
        written = answer.data["value"]
        held = {t for t, task in written.items() if task.get("status") == "claimed"}
        assert len(held) == version - v0
        assert written[answer.data["task_id"]]["holder"] == answer.agent
        assert {t: written[t] for t in DECOYS} == DECOYS
    last = v0 + len(TASKS)

    # The shard now: each task held by exactly the agent whose answer claimed it.
    shard = await sync_to_async(Shard.objects.get)(pk=QUEUE)
    assert shard.version == last
    assert shard.value == DECOYS | {
        task_id: TASKS[task_id] | {"status": "claimed", "holder": by_task[task_id].agent}
        for task_id in TASKS
    }

    # The server's records agree: the history's versions and the audit entries the
    # answers name are these claims, by these agents, in this order.
    async with httpx.AsyncClient(timeout=10, headers={"X-API-Key": queue_key}) as http:
        response = await http.get(f"{live_server_url}/api/shards/{QUEUE}/history?after={v0}")
    assert response.status_code == 200, response.text
    history = response.json()
    assert [h["version"] for h in history] == list(range(v0 + 1, last + 1))
    for entry in history:
        answer = by_version[entry["version"]]
        assert (entry["action"], entry["agent_id"], entry["audit_entry_id"]) == (
            "shard.commit",
            answer.agent,
            answer.data["audit_entry_id"],
        )
        assert entry["value"] == answer.data["value"]
    audit = await sync_to_async(
        lambda: {
            e.pk: (e.agent_id, e.version_after, e.details.get("claim"))
            for e in AuditEntry.objects.filter(pk__in=[a.data["audit_entry_id"] for a in claims])
        }
    )()
    for answer in claims:
        assert audit[answer.data["audit_entry_id"]] == (
            answer.agent,
            answer.data["version"],
            answer.data["task_id"],
        )
    ids_in_version_order = [by_version[v].data["audit_entry_id"] for v in sorted(by_version)]
    assert ids_in_version_order == sorted(ids_in_version_order)

    # Each agent ends with exactly one NOTHING_TO_CLAIM, its last answer, and each
    # was decided on the queue at version v0+40: after all forty claims committed.
    for agent, agent_answers in zip(AGENTS, per_agent, strict=True):
        assert [a.claimed for a in agent_answers] == [True] * (len(agent_answers) - 1) + [False]
        own = [a.data["version"] for a in agent_answers[:-1]]
        assert own == sorted(own), agent  # one session's claims in the order it sent them
    assert len(nothing) == len(AGENTS)
    decided_at = Counter(a.data["version"] for a in nothing)
    assert decided_at == {last: len(AGENTS)}, decided_at
    assert {a.data["shard_id"] for a in nothing} == {QUEUE}

    # It was a race: the sessions' requests overlapped.
    overlap = most_in_flight(answers)
    assert overlap >= len(AGENTS) // 2, overlap
    share = Counter(a.agent for a in claims)
    print(
        f"\n{len(claims)} claims by {len(share)} agents in {racing:.2f} s "
        f"({took:.2f} s with opening the sessions; "
        f"claims per agent {sorted(share.values(), reverse=True)}; "
        f"at most {overlap} requests in flight; "
        f"{len(answers)} tool calls, "
        f"{sum(a.received - a.sent for a in answers) / len(answers) * 1000:.0f} ms each on average)"
    )


async def test_the_task_claim_tool_describes_nothing_to_claim_with_the_status_it_gets(
    live_server_url: str, queue_key: str
) -> None:
    """A model is told what the refusal looks like; the status it names is the one
    the call then carries (it said 409, the API answers 404)."""
    async with mcp_session(live_server_url, queue_key, "alice") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("task_claim", CLAIM | {"where": {"status": "lost"}})
    assert error_of(result)["code"] == "NOTHING_TO_CLAIM"
    status = result.meta["zerolock/status"]
    assert f"NOTHING_TO_CLAIM ({status})" in (tools["task_claim"].description or "")
