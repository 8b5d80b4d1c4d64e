"""Layer 2 and 3 on /ws/agents/: invalidations go only to a shard's subscribers
(never to the committer), and the loser of a race hears why it lost."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter, defaultdict

import httpx
import jsonpatch
import pytest
import websockets
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from access.identity import Actor
from access.services import api_key_create
from shards.models import Shard
from shards.services import shard_commit, shard_create
from zerolock_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


async def a_socket(key: str, agent: str) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application,
        "/ws/agents/",
        headers=[(b"x-api-key", key.encode()), (b"x-agent-id", agent.encode())],
    )
    assert (await communicator.connect())[0]
    return communicator


async def commit(shard_id: str, agent: str, version: int, value, key_prefix: str = "") -> None:
    shard = await sync_to_async(Shard.objects.get)(pk=shard_id)
    await sync_to_async(shard_commit)(
        actor=Actor(agent, key_prefix), shard=shard, expected_version=version, new_value=value
    )


async def test_subscribers_get_invalidate_and_the_committer_and_others_do_not():
    await sync_to_async(shard_create)(
        actor=Actor("x"), shard_id="plan", shard_type="decision", initial_value=1
    )
    _, key = await sync_to_async(api_key_create)(name="k", permissions=["shard:read"])
    watcher, committer, bystander = (
        await a_socket(key, "watcher"),
        await a_socket(key, "committer"),
        await a_socket(key, "bystander"),
    )
    for socket in (watcher, committer):
        await socket.send_json_to({"type": "subscribe", "shard_ids": ["plan"]})
        assert await socket.receive_json_from() == {"type": "subscribed", "shard_ids": ["plan"]}

    await commit("plan", "committer", 1, 2)
    assert await watcher.receive_json_from(timeout=10) == {
        "type": "invalidate",
        "shard_id": "plan",
        "version": 2,
        "committed_by": "committer",
    }
    assert await committer.receive_nothing(timeout=0.3)
    assert await bystander.receive_nothing(timeout=0.1)

    await watcher.send_json_to({"type": "unsubscribe", "shard_ids": ["plan"]})
    assert (await watcher.receive_json_from())["type"] == "unsubscribed"
    await commit("plan", "someone", 2, 3)
    assert await watcher.receive_nothing(timeout=0.3)
    for socket in (watcher, committer, bystander):
        await socket.disconnect()


@pytest.mark.parametrize(
    "message",
    [
        {"type": "subscribe"},
        {"type": "subscribe", "shard_ids": "plan"},
        {"type": "subscribe", "shard_ids": ["bad id!"]},
        {"type": "subscribe", "shard_ids": [1]},
        "not an object",
    ],
)
async def test_a_malformed_subscription_gets_an_error_frame(message):
    _, key = await sync_to_async(api_key_create)(name="k", permissions=["shard:read"])
    socket = await a_socket(key, "confused")
    await socket.send_json_to(message)
    reply = await socket.receive_json_from()
    assert reply["type"] == "error" and reply["code"] in ("VALIDATION_ERROR", "UNSUPPORTED_MESSAGE")
    await socket.disconnect()


async def test_a_scoped_key_cannot_subscribe_outside_its_scope():
    _, key = await sync_to_async(api_key_create)(
        name="k", permissions=["shard:read"], shard_prefixes=["team-a."]
    )
    socket = await a_socket(key, "scoped")
    await socket.send_json_to({"type": "subscribe", "shard_ids": ["team-a.x", "team-b.y"]})
    reply = await socket.receive_json_from()
    assert (reply["type"], reply["code"]) == ("error", "PERMISSION_DENIED")
    assert reply["shard_ids"] == ["team-b.y"]
    await socket.disconnect()


async def test_a_stale_commit_sends_one_conflict_notify_whose_diff_rebuilds_the_rejected_value():
    await sync_to_async(shard_create)(
        actor=Actor("x"),
        shard_id="roster",
        shard_type="decision",
        initial_value={"lead": "ann", "crew": ["bo"]},
    )
    api_key, key = await sync_to_async(api_key_create)(name="k", permissions=["shard:read"])
    loser, winner = await a_socket(key, "loser"), await a_socket(key, "winner")
    winning = {"lead": "cy", "crew": ["bo", "di"]}
    rejected = {"lead": "ann", "crew": ["bo", "ed"], "note": "mine"}
    await commit("roster", "winner", 1, winning, api_key.prefix)
    with pytest.raises(Exception, match="not current"):
        await commit("roster", "loser", 1, rejected, api_key.prefix)
    notice = await loser.receive_json_from(timeout=10)
    assert notice["type"] == "conflict_notify"
    assert (notice["shard_id"], notice["version"]) == ("roster", 2)
    assert (notice["winning_value"], notice["rejected_value"]) == (winning, rejected)
    assert jsonpatch.apply_patch(notice["winning_value"], notice["diff"]) == rejected
    assert await loser.receive_nothing(timeout=0.3)  # exactly one
    assert await winner.receive_nothing(timeout=0.1)
    await loser.disconnect()
    await winner.disconnect()


@pytest.mark.live
def test_a_hundred_agents_get_exactly_the_invalidations_of_their_ten_shards(live_server_url):
    """100 agents x 10 of 100 shards; a burst of commits over REST; every agent
    receives exactly the invalidations for its shards, and the savings figure is
    what the counts say."""
    shard_ids = [f"scope-{n:03}" for n in range(100)]
    for shard_id in shard_ids:
        shard_create(actor=Actor("x"), shard_id=shard_id, shard_type="decision", initial_value=0)
    _, key = api_key_create(name="swarm", permissions=["shard:read", "shard:write", "admin"])
    rng = random.Random(7)
    subscriptions = {f"agent-{n:03}": set(rng.sample(shard_ids, 10)) for n in range(100)}
    committed = [rng.choice(shard_ids) for _ in range(150)]
    # Commits to a shard somebody subscribes to: one fan-out each, timed.
    fanned_out = [s for s in committed if any(s in shards for shards in subscriptions.values())]
    ws_url = live_server_url.replace("http://", "ws://") + "/ws/agents/"
    api_headers = {"X-API-Key": key, "X-Agent-Id": "committer"}

    async def scenario() -> tuple[dict[str, Counter], dict, dict]:
        received: dict[str, Counter] = defaultdict(Counter)
        sockets = {}
        for agent, shards in subscriptions.items():
            socket = await websockets.connect(
                ws_url, additional_headers={"X-API-Key": key, "X-Agent-Id": agent}
            )
            await socket.send(json.dumps({"type": "subscribe", "shard_ids": sorted(shards)}))
            assert json.loads(await socket.recv())["type"] == "subscribed"
            sockets[agent] = socket

        async def listen(agent: str, socket) -> None:
            async for message in socket:
                event = json.loads(message)
                assert event["type"] == "invalidate", event
                received[agent][event["shard_id"]] += 1

        listeners = [asyncio.create_task(listen(a, s)) for a, s in sockets.items()]
        async with httpx.AsyncClient(base_url=live_server_url, headers=api_headers) as client:

            async def ws_metrics_once(ready) -> dict:
                """Polls until the server's write-behind metrics say ready: waiting on
                a fixed sleep instead flakes when the machine is busy."""
                deadline = time.monotonic() + 30
                while not ready(metrics := (await client.get("/api/metrics/ws")).json()):
                    assert time.monotonic() < deadline, metrics
                    await asyncio.sleep(0.1)
                return metrics

            # The gauges of 100 new sockets reach the database; then a commit's
            # naive-broadcast count reads them once its one-second cache is stale.
            await ws_metrics_once(lambda m: m["connections"] >= 100)
            await asyncio.sleep(1.1)
            before = (await client.get("/api/metrics/ws")).json()
            versions = dict.fromkeys(shard_ids, 1)
            for shard_id in committed:
                response = await client.post(
                    f"/api/shards/{shard_id}/commit",
                    json={"expected_version": versions[shard_id], "new_value": versions[shard_id]},
                )
                assert response.status_code == 200, response.text
                versions[shard_id] += 1
            deadline = time.monotonic() + 10
            expected_total = sum(
                1
                for shard_id in committed
                for shards in subscriptions.values()
                if shard_id in shards
            )
            while sum(sum(c.values()) for c in received.values()) < expected_total:
                assert time.monotonic() < deadline, "invalidations missing"
                await asyncio.sleep(0.05)
            after = await ws_metrics_once(
                lambda m: (
                    m["messages_sent"] - before["messages_sent"] >= expected_total
                    and m["naive_broadcast_messages"] - before["naive_broadcast_messages"]
                    >= len(committed) * 100
                    and fanouts(m) - fanouts(before) >= len(fanned_out)
                )
            )
            await asyncio.sleep(0.5)  # nothing extra arrives
        for task in listeners:
            task.cancel()
        for socket in sockets.values():
            await socket.close()
        return received, before, after

    received, before, after = asyncio.run(scenario())
    commits_per_shard = Counter(committed)
    for agent, shards in subscriptions.items():
        expected = Counter({s: commits_per_shard[s] for s in shards if commits_per_shard[s]})
        assert received[agent] == expected, agent
    sent = after["messages_sent"] - before["messages_sent"]
    naive = after["naive_broadcast_messages"] - before["naive_broadcast_messages"]
    assert sent == sum(sum(c.values()) for c in received.values())
    # Every commit, broadcast to every open agent socket: our 100, plus any other
    # test's socket still counted by its server's gauge.
    assert len(committed) * 100 <= naive <= len(committed) * 110
    assert after["connections"] >= 100 and after["subscriptions"] >= 1000
    assert after["cost_savings_percent"] == round(
        100 * (1 - after["messages_sent"] / after["naive_broadcast_messages"]), 2
    )
    assert 100 * (1 - sent / naive) == pytest.approx(90, abs=4)
    assert fanouts(after) - fanouts(before) == len(fanned_out)
    assert after["push_delay_ms"]["p99"] is not None


def fanouts(ws_metrics: dict) -> int:
    return ws_metrics["push_delay_ms"]["fanouts"]


@pytest.mark.live
def test_a_commit_served_by_one_process_reaches_subscribers_on_another(transactional_db):
    """Two web server processes on one database and one Redis channel layer."""
    import os

    from tests.conftest import server_env, start_server, stop_server

    shard_create(actor=Actor("x"), shard_id="shared-plan", shard_type="decision", initial_value=0)
    _, key = api_key_create(name="k", permissions=["shard:read", "shard:write"])
    env = server_env()
    env["REDIS_URL"] = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    (proc_a, url_a), (proc_b, url_b) = start_server(env), start_server(env)

    async def scenario() -> tuple[list[dict], list[dict], dict]:
        headers = {"X-API-Key": key}
        on_a, on_b = [], []
        async with (
            websockets.connect(
                url_a.replace("http", "ws") + "/ws/agents/",
                additional_headers={**headers, "X-Agent-Id": "watcher-a"},
            ) as socket_a,
            websockets.connect(
                url_b.replace("http", "ws") + "/ws/agents/",
                additional_headers={**headers, "X-Agent-Id": "watcher-b"},
            ) as socket_b,
            httpx.AsyncClient(headers={**headers, "X-Agent-Id": "committer"}) as client,
        ):
            for socket in (socket_a, socket_b):
                await socket.send(json.dumps({"type": "subscribe", "shard_ids": ["shared-plan"]}))
                await socket.recv()
            for version in (1, 2, 3):
                url = (url_a, url_b)[version % 2]
                response = await client.post(
                    f"{url}/api/shards/shared-plan/commit",
                    json={"expected_version": version, "new_value": version},
                )
                assert response.status_code == 200
            for socket, got in ((socket_a, on_a), (socket_b, on_b)):
                for _ in range(3):
                    got.append(json.loads(await asyncio.wait_for(socket.recv(), timeout=5)))
            # Both processes' sockets are counted wherever the question is asked.
            for _ in range(40):
                ws = (await client.get(f"{url_a}/api/metrics/ws")).json()
                if (ws["connections"], ws["subscriptions"]) == (2, 2):
                    break
                await asyncio.sleep(0.25)
        return on_a, on_b, ws

    try:
        on_a, on_b, ws = asyncio.run(scenario())
    finally:
        stop_server(proc_a)
        stop_server(proc_b)
    for got in (on_a, on_b):
        assert [(m["type"], m["version"]) for m in got] == [
            ("invalidate", 2),
            ("invalidate", 3),
            ("invalidate", 4),
        ]
    assert (ws["connections"], ws["subscriptions"]) == (2, 2)
    assert ws["processes"] >= 2  # plus any other live server still reporting
