"""The SDK's requests over its agent socket: with the socket open, reads and
writes go over it and answer as HTTP would; while it is down they go over HTTP,
and a write caught by a closing socket is applied once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from access.services import api_key_create
from zerolock_sdk import (
    CachedZeroLockClient,
    CreateShardOptions,
    NotFoundError,
    StaleCommitError,
    SyncZeroLockClient,
    ZeroLockClient,
    ZeroLockError,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
EVERYTHING = ["shard:read", "shard:write", "shard:create", "approval:request"]


def a_key() -> str:
    return api_key_create(name="sdk-socket", permissions=EVERYTHING)[1]


class CountingTransport(httpx.AsyncHTTPTransport):
    """The HTTP requests a client made, with their headers and answers' statuses."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []
        self.statuses: list[int] = []
        self.replayed = 0  # answers the server gave from an Idempotency-Key's record

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        response = await super().handle_async_request(request)
        self.statuses.append(response.status_code)
        self.replayed += response.headers.get("Idempotent-Replayed") == "true"
        return response


async def eventually(check: Callable[[], bool], seconds: float = 10) -> None:
    for _ in range(int(seconds / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("not in time")


async def calls(zl: ZeroLockClient, ns: str) -> list[Any]:
    """The same calls on either transport, as comparable outcomes."""
    outcomes: list[Any] = []
    shard = await zl.create_shard(f"{ns}plan", CreateShardOptions(initial_value={"step": 1}))
    outcomes.append((shard.version, shard.value, shard.raw["created_by"]))
    outcomes.append((await zl.commit(f"{ns}plan", 1, {"step": 2})).version)
    try:
        await zl.commit(f"{ns}plan", 1, {"step": 3})
    except StaleCommitError as stale:
        outcomes.append(("stale", stale.status, stale.current_version, stale.current_value))
    try:
        await zl.get_shard(f"{ns}nowhere")
    except NotFoundError as missing:
        outcomes.append(("missing", missing.code, missing.status))
    try:
        await zl.create_shard(f"{ns}plan")
    except ZeroLockError as exists:
        outcomes.append(("exists", type(exists).__name__, exists.code))
    outcomes.append((await zl.get_shard(f"{ns}plan")).value)
    outcomes.append([s.id.removeprefix(ns) for s in await zl.list_shards(prefix=ns)])
    outcomes.append([h["version"] for h in await zl.history(f"{ns}plan")])
    await zl.create_shard(f"{ns}log", CreateShardOptions(type="additive", crdt_type="array"))
    outcomes.append((await zl.append(f"{ns}log", [1, {"two": "é"}])).value)
    minimal = await zl.commit(f"{ns}plan", 2, {"step": 4}, minimal=True)
    outcomes.append((minimal.version, minimal.value))
    done = await zl.txn(
        compare=[{"shard_id": f"{ns}plan", "version": 3}],
        success=[{"op": "get", "shard_id": f"{ns}plan"}],
    )
    outcomes.append((done.succeeded, done.versions.get(f"{ns}plan")))
    lease = await zl.grant_lease(30)
    outcomes.append((await zl.keepalive(lease.id)).ttl_seconds)
    outcomes.append(await zl.revoke_lease(lease.id))
    return outcomes


def test_with_the_socket_open_reads_and_writes_go_over_it_and_answer_as_http_does(
    live_server_url,
):
    key = a_key()

    async def scenario() -> None:
        http = CountingTransport()
        async with ZeroLockClient(
            live_server_url, agent_id="a", api_key=key, transport=http
        ) as plain:
            over_http = await calls(plain, "h.")
        over_socket_transport = CountingTransport()
        async with ZeroLockClient(
            live_server_url, agent_id="a", api_key=key, transport=over_socket_transport
        ) as zl:
            await zl.connect_ws()
            assert zl.socket_open
            over_socket = await calls(zl, "w.")
            assert zl._socket is not None and zl._socket.answered == zl.requests_sent
            assert (await zl.health())["status"] in ("ok", "degraded")  # a probe: HTTP
        assert over_socket == over_http
        assert over_socket[2] == ("stale", 409, 2, {"step": 2})
        assert [r.url.path for r in over_socket_transport.sent] == ["/api/health"]
        assert len(http.sent) == plain.requests_sent  # the same calls, each over HTTP

    asyncio.run(scenario())


def test_fifty_concurrent_commits_over_one_socket_each_land_once(live_server_url):
    key = a_key()

    async def scenario() -> None:
        http = CountingTransport()
        async with ZeroLockClient(
            live_server_url, agent_id="burst", api_key=key, transport=http
        ) as zl:
            await zl.connect_ws()
            await zl.create_shard("bag", CreateShardOptions(type="additive", crdt_type="array"))
            await asyncio.gather(*(zl.create_shard(f"c{n}") for n in range(50)))
            appended = await asyncio.gather(
                *(zl.append("bag", [n], minimal=True) for n in range(50))
            )
            committed = await asyncio.gather(*(zl.commit(f"c{n}", 1, n) for n in range(50)))
            assert sorted(a.version for a in appended) == list(range(2, 52))
            assert [c.version for c in committed] == [2] * 50
            assert sorted((await zl.get_shard("bag")).value) == list(range(50))
            histories = await asyncio.gather(*(zl.history(f"c{n}") for n in range(50)))
            assert all([h["version"] for h in history] == [1, 2] for history in histories)
            assert http.sent == []  # 50 at once, over a socket that takes 32: none refused

    asyncio.run(scenario())


def test_a_socket_closed_mid_burst_falls_back_to_http_applies_each_write_once_and_reconnects(
    live_server_url,
):
    key = a_key()

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=key) as setup:
            await asyncio.gather(
                *(
                    setup.create_shard(f"s{n}", CreateShardOptions(initial_value=0))
                    for n in range(200)
                )
            )
        http = CountingTransport()
        async with ZeroLockClient(
            live_server_url, agent_id="burst", api_key=key, transport=http
        ) as zl:
            await zl.connect_ws()
            socket = zl._socket
            assert socket is not None
            burst = asyncio.gather(*(zl.commit(f"s{n}", 1, n) for n in range(200)))
            await eventually(lambda: socket.answered >= 20)
            cut_off = socket.in_flight
            assert socket.connection is not None
            await socket.connection.close()
            results = await burst  # a StaleCommitError here would be a write applied twice
            assert cut_off > 0
            assert [r.version for r in results] == [2] * 200
            assert socket.answered < 200 and len(http.sent) >= cut_off
            writes = [r for r in http.sent if r.method == "POST"]
            assert all(r.headers.get("Idempotency-Key") for r in writes)
            # Writes the server had applied before the socket closed: their retry
            # was the same request (key and bytes), answered from the record.
            assert 0 < http.replayed <= cut_off
            assert all(
                status == 200 or status == 409 for status in http.statuses
            )  # 409: in progress
            await eventually(lambda: zl.socket_open)
            assert socket.reconnects == 1
            sent_before = len(http.sent)
            assert (await zl.get_shard("s0")).version == 2
            assert len(http.sent) == sent_before  # over the socket again
        async with ZeroLockClient(live_server_url, agent_id="check", api_key=key) as check:
            histories = await asyncio.gather(*(check.history(f"s{n}") for n in range(200)))
            assert all([h["version"] for h in history] == [1, 2] for history in histories)
            assert [(await check.get_shard(f"s{n}")).value for n in (0, 7, 199)] == [0, 7, 199]

    asyncio.run(scenario())


def test_without_a_socket_requests_go_over_http_as_before(live_server_url):
    key = a_key()

    async def scenario() -> None:
        http = CountingTransport()
        async with ZeroLockClient(
            live_server_url, agent_id="plain", api_key=key, transport=http
        ) as zl:
            await zl.create_shard("p", CreateShardOptions(initial_value=1))
            assert (await zl.commit("p", 1, 2)).version == 2
            with pytest.raises(StaleCommitError) as stale:
                await zl.commit("p", 1, 3)
            assert stale.value.current_version == 2
            assert (await zl.get_shard("p")).value == 2
            assert not zl.socket_open
        assert [(r.method, r.url.path) for r in http.sent] == [
            ("POST", "/api/shards"),
            ("POST", "/api/shards/p/commit"),
            ("POST", "/api/shards/p/commit"),
            ("GET", "/api/shards/p"),
        ]
        assert not any("Idempotency-Key" in r.headers for r in http.sent)

    asyncio.run(scenario())


def test_the_cached_client_sends_over_its_socket_and_still_hears_pushes_after_reconnecting(
    live_server_url,
):
    key = a_key()

    async def scenario() -> None:
        http = CountingTransport()
        async with (
            ZeroLockClient(live_server_url, agent_id="other", api_key=key) as other,
            CachedZeroLockClient(
                live_server_url, agent_id="cached", api_key=key, transport=http
            ) as zl,
        ):
            await other.create_shard("cfg", CreateShardOptions(initial_value={"mode": "a"}))
            reread: list[Any] = []

            async def on_conflict(event: dict[str, Any]) -> None:
                # A request over the socket from inside a push handler: answered.
                reread.append((await zl.get_shard(event["shard_id"])).value)

            zl.set_on_conflict(on_conflict)
            assert (await zl.get_shard("cfg")).value == {"mode": "a"}
            await zl.get_shard("cfg")
            assert zl.cache_hits == 1
            await other.commit("cfg", 1, {"mode": "b"})
            await eventually(lambda: not zl.is_fresh("cfg"))
            with pytest.raises(StaleCommitError):
                await zl.commit("cfg", 1, {"mode": "c"})
            await eventually(lambda: bool(reread))
            assert reread == [{"mode": "b"}]
            socket = zl._socket
            assert socket is not None and socket.connection is not None
            await socket.connection.close()
            await eventually(lambda: socket.reconnects == 1 and zl.socket_open)
            assert (await zl.get_shard("cfg")).value == {"mode": "b"}  # read again
            await other.commit("cfg", 2, {"mode": "d"})  # heard: it subscribed again
            await eventually(lambda: not zl.is_fresh("cfg"))
            assert (await zl.get_shard("cfg")).value == {"mode": "d"}
        assert http.sent == []

    asyncio.run(scenario())


def test_the_sync_client_sends_over_the_socket_once_connected(live_server_url):
    http = CountingTransport()
    with SyncZeroLockClient(
        live_server_url, agent_id="script", api_key=a_key(), transport=http
    ) as zl:
        zl.create_shard("counter", CreateShardOptions(initial_value=0))
        zl.connect_ws()
        assert zl.commit("counter", 1, 1).version == 2
        with pytest.raises(StaleCommitError):
            zl.commit("counter", 1, 5)
        assert zl.get_shard("counter").value == 1
    assert [r.url.path for r in http.sent] == ["/api/shards"]
