"""Watch: every change after a revision, in order, then live ones; resumable."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from access.identity import Actor
from access.services import api_key_create
from audit.models import AuditEntry
from coordination.txn import txn_apply
from shards.services import shard_create
from zerolock_site.asgi import application

SHARDS = [f"w.{n:02}" for n in range(50)]


def make_shards() -> None:
    for shard_id in SHARDS:
        shard_create(actor=Actor("x"), shard_id=shard_id, shard_type="decision", initial_value=0)


def burst(key, rounds: int) -> None:
    """``rounds`` transactions, each writing all 50 shards: 50 changes apiece."""
    for n in range(rounds):
        txn_apply(
            actor=Actor("writer"),
            key=key,
            body={"success": [{"op": "put", "shard_id": s, "value": n} for s in SHARDS]},
        )


def read_events(response: httpx.Response, until: int, seen: list[dict]) -> None:
    event = {}
    for line in response.iter_lines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
        elif line == "" and event:
            seen.append(event)
            event = {}
            if len(seen) >= until:
                return


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_watcher_that_drops_out_during_ten_thousand_changes_sees_each_once_in_order(
    live_server_url,
):
    make_shards()
    key, raw = api_key_create(name="w", permissions=["shard:read", "shard:write"])
    start = AuditEntry.objects.order_by("-id").values_list("id", flat=True).first()
    writer = threading.Thread(target=burst, args=(key, 200))
    seen: list[dict] = []
    url = f"{live_server_url}/api/watch"
    with httpx.Client(headers={"X-API-Key": raw}, timeout=30) as client:
        with client.stream("GET", url, params={"prefix": "w.", "since": start}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            writer.start()
            read_events(response, 3000, seen)
        # Disconnected mid-burst; come back from the last revision seen.
        with client.stream(
            "GET", url, params={"prefix": "w.", "since": seen[-1]["revision"]}
        ) as response:
            read_events(response, 10_000, seen)
    writer.join()
    revisions = [e["revision"] for e in seen]
    assert len(seen) == 10_000
    assert revisions == sorted(set(revisions))  # each once, in order
    expected = list(
        AuditEntry.objects.filter(id__gt=start, shard_id__startswith="w.", action="shard.commit")
        .order_by("id")
        .values_list("id", flat=True)
    )
    assert revisions == expected
    assert seen[-1]["value"] == 199


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_watch_refuses_bad_input_and_a_compacted_history(live_server_url):
    _, raw = api_key_create(name="w", permissions=["shard:read"])
    url = f"{live_server_url}/api/watch"
    assert (
        httpx.get(url, params={"since": "x"}, headers={"X-API-Key": raw}).json()["error"]["code"]
        == "VALIDATION_ERROR"
    )
    assert httpx.get(url).status_code == 401
    shard_create(actor=Actor("x"), shard_id="gone", shard_type="decision", initial_value=0)
    oldest = AuditEntry.objects.order_by("id").first().pk
    AuditEntry.objects.filter(pk=oldest).delete()  # what a compaction would do
    compacted = httpx.get(url, params={"since": 0}, headers={"X-API-Key": raw})
    assert compacted.status_code == 410
    assert compacted.json()["error"] == {
        "code": "COMPACTED",
        "message": compacted.json()["error"]["message"],
        "oldest_revision": oldest + 1,
    }


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_watch_streams_past_and_live_changes_in_order():
    await sync_to_async(make_shards)()
    key, raw = await sync_to_async(api_key_create)(
        name="w", permissions=["shard:read", "shard:write"]
    )
    start = await sync_to_async(lambda: AuditEntry.objects.order_by("-id").first().pk)()
    await sync_to_async(burst)(key, 2)  # 100 past changes
    socket = WebsocketCommunicator(
        application,
        "/ws/agents/",
        headers=[(b"x-api-key", raw.encode()), (b"x-agent-id", b"watcher")],
    )
    assert (await socket.connect())[0]
    await socket.send_json_to({"type": "watch", "prefix": "w.0", "since": start})
    assert (await socket.receive_json_from())["type"] == "watching"
    past = [await socket.receive_json_from(timeout=5) for _ in range(20)]  # w.00-w.09 x 2
    await sync_to_async(burst)(key, 1)
    live = [await socket.receive_json_from(timeout=5) for _ in range(10)]
    events = past + live
    assert all(e["type"] == "watch_event" for e in events)
    assert [e["revision"] for e in events] == sorted({e["revision"] for e in events})
    assert {e["shard_id"] for e in events} == {f"w.0{n}" for n in range(10)}
    assert [e["value"] for e in live] == [0] * 10  # a new round counts from 0 again
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()
    await asyncio.sleep(0)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_key_holds_at_most_its_cap_of_open_watches_and_gets_one_back_when_one_closes():
    from tests.conftest import server_env, start_server, stop_server

    _, greedy = api_key_create(name="greedy", permissions=["shard:read"])
    _, other = api_key_create(name="other", permissions=["shard:read"])
    proc, base = start_server(server_env() | {"ZEROLOCK_MAX_WATCHES_PER_KEY": "2"})
    url = f"{base}/api/watch"

    readers = []  # held: a line iterator dropped by the GC closes its connection

    def opened(client: httpx.Client, stack: contextlib.ExitStack) -> httpx.Response:
        response = stack.enter_context(client.stream("GET", url))
        if response.status_code == 200:
            readers.append(lines := response.iter_lines())
            assert next(lines) == ": watching"  # the stream is really open
        else:
            response.read()
        return response

    try:
        with (
            httpx.Client(headers={"X-API-Key": greedy}, timeout=10) as mine,
            httpx.Client(headers={"X-API-Key": other}, timeout=10) as theirs,
            contextlib.ExitStack() as held,
        ):
            first = contextlib.ExitStack()
            assert opened(mine, first).status_code == 200
            assert opened(mine, held).status_code == 200
            refused = opened(mine, held)
            assert refused.status_code == 429
            assert refused.json()["error"] == {
                "code": "TOO_MANY_WATCHES",
                "message": refused.json()["error"]["message"],
                "limit": 2,
            }
            assert opened(theirs, held).status_code == 200  # counted per key
            first.close()  # the server notices within a poll (100 ms)
            deadline = time.monotonic() + 5
            while (again := opened(mine, held)).status_code == 429:
                assert time.monotonic() < deadline, "a closed watch was never given back"
                time.sleep(0.1)
            assert again.status_code == 200
    finally:
        stop_server(proc)


@pytest.mark.django_db(transaction=True)
async def test_socket_watches_count_toward_the_keys_cap_and_a_replaced_watch_counts_once(
    settings,
):
    settings.ZEROLOCK_MAX_WATCHES_PER_KEY = 2
    _, raw = await sync_to_async(api_key_create)(name="w", permissions=["shard:read"])

    async def watching() -> tuple[WebsocketCommunicator, dict]:
        socket = WebsocketCommunicator(
            application, "/ws/agents/", headers=[(b"x-api-key", raw.encode())]
        )
        assert (await socket.connect())[0]
        await socket.send_json_to({"type": "watch", "prefix": "w."})
        return socket, await socket.receive_json_from()

    first, answer = await watching()
    assert answer["type"] == "watching"
    await first.send_json_to({"type": "watch", "prefix": "w.1"})  # replaces its own
    assert (await first.receive_json_from())["type"] == "watching"
    second, answer = await watching()
    assert answer["type"] == "watching"
    third, refused = await watching()
    assert (refused["type"], refused["code"], refused["limit"]) == ("error", "TOO_MANY_WATCHES", 2)
    await first.disconnect()
    await third.send_json_to({"type": "watch", "prefix": "w."})  # the closed one's place
    assert (await third.receive_json_from())["type"] == "watching"
    await second.disconnect()
    await third.disconnect()
    await asyncio.sleep(0)
