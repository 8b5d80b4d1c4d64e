"""Session leases: granted over an agent's socket with ``"session": true``, kept
alive by the open socket with no keep-alive call, and ended ``ttl_seconds`` after
the agent's last socket closes, which releases what they hold as an expiry does."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
import websockets
from asgiref.sync import sync_to_async
from django.utils import timezone

from access.services import api_key_create
from audit.models import AuditAction, AuditEntry
from tests.conftest import server_env, start_server, stop_server
from tests.realtime.test_socket_requests import EVERYTHING, Socket, ws_url

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

TTL = 2


def elect(lease_id: str) -> dict[str, Any]:
    return {
        "compare": [{"shard_id": "cluster", "path": ["leader"], "op": "not_exists"}],
        "success": [
            {
                "op": "put",
                "shard_id": "cluster",
                "path": ["leader"],
                "value": "alice",
                "lease_id": lease_id,
            }
        ],
        "failure": [],
    }


async def leader(url: str, key: str) -> Any:
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as http:
        answer = await http.get("/api/shards/cluster")
    assert answer.status_code == 200, answer.text
    return answer.json()["value"].get("leader")


async def until_no_leader(url: str, key: str, seconds: float) -> float:
    started = time.monotonic()
    while await leader(url, key) is not None:
        assert time.monotonic() - started < seconds, "the session lease outlived its bound"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def alice_leads(socket: Socket) -> dict[str, Any]:
    """Alice takes a session lease over her socket and becomes leader under it."""
    status, lease = await socket.call("POST", "/api/leases", {"ttl_seconds": TTL, "session": True})
    assert status == 201, lease
    assert lease["session"] is True and lease["holder"] == "alice"
    status, body = await socket.call(
        "POST", "/api/shards", {"id": "cluster", "type": "decision", "initial_value": {}}
    )
    assert status == 201, body
    status, body = await socket.call("POST", "/api/txn", elect(lease["lease_id"]))
    assert status == 200 and body["succeeded"] is True, body
    return lease


async def test_a_session_lease_lives_with_its_socket_and_ends_ttl_after_it_closes(
    live_server_url,
):
    _, key = await sync_to_async(api_key_create)(name="workers", permissions=EVERYTHING)
    alice = {"X-API-Key": key, "X-Agent-Id": "alice"}
    async with websockets.connect(ws_url(live_server_url), additional_headers=alice) as conn:
        lease = await alice_leads(Socket(conn))
        # Twice its ttl with no keep-alive: the open socket keeps it.
        await asyncio.sleep(2 * TTL + 0.5)
        assert await leader(live_server_url, key) == "alice"
    took = await until_no_leader(live_server_url, key, TTL + 3)
    assert TTL - 0.5 <= took <= TTL + 1, took
    async with httpx.AsyncClient(base_url=live_server_url, headers=alice) as http:
        gone = await http.post(f"/api/leases/{lease['lease_id']}/keepalive")
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "LEASE_NOT_FOUND")


def ends_written(lease_id: str) -> dict[str, Any]:
    """What the audit log holds about this lease's end, read straight from the
    database: an API read would sweep by itself and prove nothing."""
    entries = AuditEntry.objects.filter(
        action__in=[
            AuditAction.LEASE_ENDED,
            AuditAction.LEASE_RELEASED_PATH,
            AuditAction.RESERVATION_ENDED,
        ]
    ).order_by("pk")
    return {
        e.action: e
        for e in entries
        if e.details.get("lease_id") == lease_id or e.details.get("why") == "lease expired"
    }


async def test_a_session_lease_ends_on_time_with_nobody_asking_after_the_last_socket_closes(
    live_server_url,
):
    """No request of any kind after the socket closes: only the server's own sweep
    can write the end, and it must, though the process has no socket left."""
    _, key = await sync_to_async(api_key_create)(name="workers", permissions=EVERYTHING)
    alice = {"X-API-Key": key, "X-Agent-Id": "alice"}
    async with websockets.connect(ws_url(live_server_url), additional_headers=alice) as conn:
        socket = Socket(conn)
        lease = await alice_leads(socket)
        status, reserved = await socket.call(
            "POST", "/api/reservations", {"patterns": ["src/**"], "lease_id": lease["lease_id"]}
        )
        assert status == 201, reserved
    closed = timezone.now()
    await asyncio.sleep(TTL + 2.5)
    written = await sync_to_async(ends_written)(lease["lease_id"])
    assert set(written) == {
        AuditAction.LEASE_ENDED,
        AuditAction.LEASE_RELEASED_PATH,
        AuditAction.RESERVATION_ENDED,
    }, written
    ended = written[AuditAction.LEASE_ENDED]
    assert ended.details["why"] == "expired"
    assert (ended.created_at - closed).total_seconds() <= TTL + 1.5
    assert (
        written[AuditAction.RESERVATION_ENDED].details["reservation_id"]
        == (reserved["reservation_id"])
    )


async def test_a_reconnect_within_the_grace_period_keeps_the_session_lease(live_server_url):
    _, key = await sync_to_async(api_key_create)(name="workers", permissions=EVERYTHING)
    alice = {"X-API-Key": key, "X-Agent-Id": "alice"}
    url = ws_url(live_server_url)
    async with websockets.connect(url, additional_headers=alice) as conn:
        await alice_leads(Socket(conn))
    await asyncio.sleep(TTL / 4)
    async with websockets.connect(url, additional_headers=alice):
        await asyncio.sleep(2 * TTL)
        assert await leader(live_server_url, key) == "alice"


async def test_a_session_lease_needs_an_open_socket_of_its_agent_and_key(live_server_url):
    _, key = await sync_to_async(api_key_create)(name="workers", permissions=EVERYTHING)
    _, other = await sync_to_async(api_key_create)(name="others", permissions=EVERYTHING)
    alice = {"X-API-Key": key, "X-Agent-Id": "alice"}
    async with httpx.AsyncClient(base_url=live_server_url) as http:
        asked = {"ttl_seconds": TTL, "session": True}
        alone = await http.post("/api/leases", json=asked, headers=alice)
        assert (alone.status_code, alone.json()["error"]["code"]) == (409, "NO_SESSION")
        bad = await http.post("/api/leases", json={**asked, "session": "yes"}, headers=alice)
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "VALIDATION_ERROR")
        # Alice's socket under another key does not make a session for this key.
        other_alice = {"X-API-Key": other, "X-Agent-Id": "alice"}
        async with websockets.connect(ws_url(live_server_url), additional_headers=other_alice):
            await asyncio.sleep(0.2)
            crossed = await http.post("/api/leases", json=asked, headers=alice)
            assert crossed.status_code == 409, crossed.text
            # Over HTTP too, once the agent has a socket open with this key.
            async with websockets.connect(ws_url(live_server_url), additional_headers=alice):
                await asyncio.sleep(0.2)
                granted = await http.post("/api/leases", json=asked, headers=alice)
                assert granted.status_code == 201 and granted.json()["session"] is True


def test_a_session_lease_granted_on_one_process_ends_when_its_socket_there_closes(
    live_server_url,
):
    """Read on the test's own server the whole time, while the socket and the lease
    live on a second server process sharing the database."""
    _, key = api_key_create(name="workers", permissions=EVERYTHING)
    other, other_url = start_server(server_env())
    alice = {"X-API-Key": key, "X-Agent-Id": "alice"}

    async def run() -> float:
        async with websockets.connect(ws_url(other_url), additional_headers=alice) as conn:
            await alice_leads(Socket(conn))
            await asyncio.sleep(2 * TTL)
            assert await leader(live_server_url, key) == "alice"
        return await until_no_leader(live_server_url, key, TTL + 3)

    try:
        took = asyncio.run(run())
    finally:
        stop_server(other)
    assert took <= TTL + 1, took


async def test_eighty_agents_over_their_sockets_claim_a_hundred_tasks_exactly_once(
    live_server_url,
):
    _, key = await sync_to_async(api_key_create)(name="swarm", permissions=EVERYTHING)
    tasks = {f"t{n:03}": {"status": "pending"} for n in range(100)}
    planner = {"X-API-Key": key, "X-Agent-Id": "planner"}
    async with httpx.AsyncClient(base_url=live_server_url, headers=planner) as http:
        made = await http.post(
            "/api/shards", json={"id": "queue", "type": "decision", "initial_value": tasks}
        )
        assert made.status_code == 201, made.text
    claim = {"where": {"status": "pending"}, "set": {"status": "claimed"}}

    async def agent(n: int) -> list[str]:
        headers = {"X-API-Key": key, "X-Agent-Id": f"agent-{n:02}"}
        taken: list[str] = []
        async with websockets.connect(ws_url(live_server_url), additional_headers=headers) as c:
            socket = Socket(c)
            while True:
                status, body = await socket.call("POST", "/api/shards/queue/claim", claim)
                if status == 404 and body["error"]["code"] == "NOTHING_TO_CLAIM":
                    return taken
                assert status == 200, body
                assert body["task"]["holder"] == f"agent-{n:02}"
                taken.append(body["task_id"])

    claimed = await asyncio.gather(*(agent(n) for n in range(80)))
    every = [task for taken in claimed for task in taken]
    assert len(every) == 100 and set(every) == set(tasks)  # none lost, none twice
    async with httpx.AsyncClient(base_url=live_server_url, headers={"X-API-Key": key}) as http:
        shard = (await http.get("/api/shards/queue")).json()
    assert shard["version"] == 101
    holders = {task: f"agent-{n:02}" for n, taken in enumerate(claimed) for task in taken}
    assert {task: value["holder"] for task, value in shard["value"].items()} == holders
