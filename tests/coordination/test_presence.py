"""Presence: GET /api/agents lists the agents whose sockets are open, across
server processes, and loses them when the socket closes or its process dies."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import httpx
import pytest
import time_machine
import websockets
from asgiref.sync import sync_to_async

from access.services import api_key_create
from coordination.models import AgentSession
from coordination.sessions import sessions_seen
from tests.conftest import server_env, start_server, stop_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def ws_url(http_url: str) -> str:
    return http_url.replace("http://", "ws://") + "/ws/agents/"


async def agents(url: str, key: str) -> dict[str, dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as http:
        answer = await http.get("/api/agents")
    assert answer.status_code == 200, answer.text
    return {entry["agent_id"]: entry for entry in answer.json()["results"]}


async def until(predicate: Any, seconds: float) -> float:
    """Seconds until ``predicate()`` (a coroutine) is true; fails after ``seconds``."""
    started = time.monotonic()
    while not await predicate():
        assert time.monotonic() - started < seconds, "not within the bound"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_connected_agents_are_listed_with_their_sockets_and_leases(live_server_url):
    _, workers = await sync_to_async(api_key_create)(
        name="workers", permissions=["shard:read", "shard:write"]
    )
    _, watcher = await sync_to_async(api_key_create)(name="watcher", permissions=["shard:read"])
    alice = {"X-API-Key": workers, "X-Agent-Id": "alice"}
    bob = {"X-API-Key": workers, "X-Agent-Id": "bob"}
    async with httpx.AsyncClient(base_url=live_server_url, headers=alice) as http:
        lease = (await http.post("/api/leases", json={"ttl_seconds": 60})).json()
    url = ws_url(live_server_url)
    async with (
        websockets.connect(url, additional_headers=alice),
        websockets.connect(url, additional_headers=alice),
        websockets.connect(url, additional_headers=bob) as bob_socket,
    ):
        listed = await agents(live_server_url, watcher)
        assert sorted(listed) == ["alice", "bob"]
        assert listed["alice"]["sockets"] == 2 and listed["bob"]["sockets"] == 1
        assert listed["alice"]["key"]["name"] == "workers"
        assert [held["lease_id"] for held in listed["alice"]["leases"]] == [lease["lease_id"]]
        assert listed["bob"]["leases"] == []
        await bob_socket.close()
        took = await until(lambda: _gone(live_server_url, watcher, "bob"), 5)
        assert took < 5
        assert (await agents(live_server_url, watcher))["alice"]["sockets"] == 2
    await until(lambda: _gone(live_server_url, watcher, "alice"), 5)


async def _gone(url: str, key: str, agent_id: str) -> bool:
    return agent_id not in await agents(url, key)


async def test_a_socket_without_an_agent_id_is_no_agent(live_server_url):
    _, key = await sync_to_async(api_key_create)(name="anon", permissions=["shard:read"])
    async with websockets.connect(ws_url(live_server_url), additional_headers={"X-API-Key": key}):
        assert await agents(live_server_url, key) == {}


async def test_a_scoped_key_sees_only_the_agents_confined_to_its_scopes(live_server_url):
    async def key(name: str, scopes: list[str]) -> str:
        _, raw = await sync_to_async(api_key_create)(
            name=name, permissions=["shard:read"], shard_prefixes=scopes
        )
        return raw

    team_a = await key("team-a", ["team-a."])
    team_a_ci = await key("team-a-ci", ["team-a.ci."])
    team_b = await key("team-b", ["team-b."])
    everything = await key("ops", [])
    url = ws_url(live_server_url)
    async with (
        websockets.connect(url, additional_headers={"X-API-Key": team_a, "X-Agent-Id": "ann"}),
        websockets.connect(url, additional_headers={"X-API-Key": team_a_ci, "X-Agent-Id": "cid"}),
        websockets.connect(url, additional_headers={"X-API-Key": team_b, "X-Agent-Id": "ben"}),
        websockets.connect(url, additional_headers={"X-API-Key": everything, "X-Agent-Id": "oz"}),
    ):
        assert sorted(await agents(live_server_url, everything)) == ["ann", "ben", "cid", "oz"]
        assert sorted(await agents(live_server_url, team_a)) == ["ann", "cid"]
        assert sorted(await agents(live_server_url, team_a_ci)) == ["cid"]
        assert sorted(await agents(live_server_url, team_b)) == ["ben"]


async def test_listing_agents_needs_shard_read(live_server_url):
    _, writer = await sync_to_async(api_key_create)(name="w", permissions=["shard:write"])
    async with httpx.AsyncClient(base_url=live_server_url, headers={"X-API-Key": writer}) as http:
        answer = await http.get("/api/agents")
    assert answer.status_code == 403 and answer.json()["error"]["permission"] == "shard:read"


def test_a_server_killed_with_sigkill_loses_its_agents_within_the_timeout(live_server_url):
    _, key = api_key_create(name="k", permissions=["shard:read"])
    doomed, doomed_url = start_server(server_env())

    async def run() -> float:
        socket = await websockets.connect(
            ws_url(doomed_url), additional_headers={"X-API-Key": key, "X-Agent-Id": "carol"}
        )
        # Listed by the other process, which reads the same database.
        await until(lambda: _listed(live_server_url, key, "carol"), 5)
        os.kill(doomed.pid, signal.SIGKILL)
        killed = time.monotonic()
        await until(lambda: _gone(live_server_url, key, "carol"), 10)
        socket.transport.abort()
        return time.monotonic() - killed

    try:
        took = asyncio.run(run())
    finally:
        stop_server(doomed)
    # Timeout 4 s, renewed every second: gone within about 5 s of the kill.
    assert took <= 6, took


async def _listed(url: str, key: str, agent_id: str) -> bool:
    return agent_id in await agents(url, key)


def test_a_renewal_keeps_open_sessions_and_drops_dead_ones(settings):
    settings.ZEROLOCK_SESSION_TIMEOUT_SECONDS = 4
    with time_machine.travel("2026-12-02 08:00:00", tick=False) as clock:
        kept = AgentSession.objects.create(key_prefix="zl_a", agent_id="a", process="p1")
        dead = AgentSession.objects.create(key_prefix="zl_b", agent_id="b", process="p2")
        clock.shift(3)
        sessions_seen([kept.pk])
        clock.shift(2)
        assert list(AgentSession.objects.live().values_list("agent_id", flat=True)) == ["a"]
        sessions_seen([kept.pk])
        assert not AgentSession.objects.filter(pk=dead.pk).exists()
        assert AgentSession.objects.filter(pk=kept.pk).exists()
