"""The CrewAI tools, through CrewAI's own tool interface (``BaseTool.run`` /
``arun`` on the tools a CrewAI ``Agent`` holds), with no LLM: what they answer,
and what reached the live server."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from tests.sdk.extras import require

# CrewAI reports usage to its own service unless told not to; tests send nothing out.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
require("crewai", "crewai")

from crewai import Agent  # noqa: E402
from crewai.tools import BaseTool  # noqa: E402

from access.services import api_key_create  # noqa: E402
from zerolock_sdk import CreateShardOptions, SyncZeroLockClient  # noqa: E402
from zerolock_sdk.crewai import create_zerolock_tools  # noqa: E402

pytestmark = [
    pytest.mark.live,
    pytest.mark.django_db(transaction=True),
    # CrewAI's own Agent fields warn about themselves; not ours to fix.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai"),
]


@pytest.fixture(autouse=True)
def _an_unused_model_key(monkeypatch):
    # CrewAI 1.6 (the newest beside mcp 2.x: later ones pin mcp<2) builds its
    # default LLM as an Agent is made, and that wants a key. No model runs here.
    monkeypatch.setenv("OPENAI_API_KEY", os.environ.get("OPENAI_API_KEY", "sk-unused"))


def crew_member(url: str, key: str, name: str) -> Agent:
    return Agent(
        role=name,
        goal="coordinate through ZeroLock",
        backstory="a test crew member; its tools are called directly, no model runs",
        tools=create_zerolock_tools(url, agent_id=name, api_key=key),
    )


def tool(agent: Agent, name: str) -> BaseTool:
    return next(t for t in agent.tools if t.name == name)


def test_crewai_tools_read_commit_and_claim_on_the_live_server(live_server_url):
    _, key = api_key_create(name="crew", permissions=["shard:read", "shard:write"])
    _, admin = api_key_create(name="crew admin", permissions=["admin"])
    with SyncZeroLockClient(live_server_url, agent_id="setup", api_key=admin) as server:
        server.create_shard("crew.plan", CreateShardOptions(initial_value={"topic": "none"}))
        tasks = {f"t{n}": {"status": "pending"} for n in (1, 2, 3)}
        server.create_shard("crew.queue", CreateShardOptions(initial_value=tasks))
        alice, bob = (crew_member(live_server_url, key, n) for n in ("crew-alice", "crew-bob"))
        assert {t.name for t in alice.tools} == {"read_shard", "commit_shard", "claim_task"}
        assert all(isinstance(t, BaseTool) for t in alice.tools)
        try:
            read = json.loads(tool(alice, "read_shard").run(shard_id="crew.plan"))
            assert read == {"shard_id": "crew.plan", "version": 1, "value": {"topic": "none"}}

            committed = json.loads(
                tool(alice, "commit_shard").run(
                    shard_id="crew.plan", new_value={"topic": "crdts"}, expected_version=1
                )
            )
            assert committed == {"committed": True, "version": 2}
            # bob decided on version 1 too: told what won, nothing written.
            lost = json.loads(
                tool(bob, "commit_shard").run(
                    shard_id="crew.plan", new_value={"topic": "occ"}, expected_version=1
                )
            )
            assert lost == {
                "committed": False,
                "error": "STALE_VERSION",
                "current_version": 2,
                "current_value": {"topic": "crdts"},
            }
            history = server.history("crew.plan")
            assert [(h["version"], h["agent_id"], h["value"]) for h in history] == [
                (1, "setup", {"topic": "none"}),
                (2, "crew-alice", {"topic": "crdts"}),
            ]

            won = json.loads(tool(bob, "claim_task").run(shard_id="crew.queue", task_id="t1"))
            again = json.loads(tool(alice, "claim_task").run(shard_id="crew.queue", task_id="t1"))
            assert won == {"task_id": "t1", "claimed": True, "holder": "crew-bob"}
            assert again == {"task_id": "t1", "claimed": False, "holder": "crew-bob"}
            # The async path CrewAI uses for async crews gives the same answers.
            # (CrewAI 1.7+ calls it through BaseTool.arun; 1.6 has none, so its own.)
            claim = tool(alice, "claim_task")
            arun = getattr(claim, "arun", claim._arun)
            other = asyncio.run(arun(shard_id="crew.queue", task_id="t2"))
            assert json.loads(other)["claimed"] is True
            # No task_id: the server picks the pending one, then says none is left.
            picked = json.loads(tool(bob, "claim_task").run(shard_id="crew.queue"))
            assert (picked["task_id"], picked["claimed"], picked["holder"]) == (
                "t3",
                True,
                "crew-bob",
            )
            none_left = json.loads(tool(alice, "claim_task").run(shard_id="crew.queue"))
            assert none_left == {"task_id": None, "claimed": False, "holder": None}
            assert server.get_shard("crew.queue").value == {
                "t1": {"status": "claimed", "holder": "crew-bob"},
                "t2": {"status": "claimed", "holder": "crew-alice"},
                "t3": {"status": "claimed", "holder": "crew-bob"},
            }
        finally:
            for member in (alice, bob):
                member.tools[0].client.close()


def test_a_tool_call_with_arguments_that_do_not_fit_is_refused_before_any_request(
    live_server_url,
):
    _, key = api_key_create(name="crew", permissions=["shard:read", "shard:write"])
    member = crew_member(live_server_url, key, "crew-carol")
    commit = tool(member, "commit_shard")
    try:
        sent = commit.client.requests_sent
        with pytest.raises(ValueError):
            commit.run(shard_id="crew.plan", new_value=1)  # no expected_version
        assert commit.client.requests_sent == sent
    finally:
        commit.client.close()
