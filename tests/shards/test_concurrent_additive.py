"""Additive shards under real concurrency against live servers: nothing lost,
nothing duplicated, and acknowledged writes survive SIGKILL."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections import Counter

import httpx
import pytest

from access.services import api_key_create
from tests.conftest import server_env, start_server, stop_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live_key(transactional_db) -> str:
    _, raw = api_key_create(
        name="crdt-swarm", permissions=["shard:read", "shard:write", "shard:create"]
    )
    return raw


def headers(key: str, agent: str) -> dict[str, str]:
    return {"X-API-Key": key, "X-Agent-Id": agent}


def create(url: str, key: str, shard_id: str, crdt_type: str, initial=None) -> None:
    body = {"id": shard_id, "type": "additive", "crdt_type": crdt_type}
    if initial is not None:
        body["initial_value"] = initial
    response = httpx.post(f"{url}/api/shards", json=body, headers=headers(key, "creator"))
    assert response.status_code == 201, response.text


async def swarm(
    url: str, key: str, shard_id: str, bodies_by_agent: dict[str, list[dict]]
) -> list[int]:
    limits = httpx.Limits(max_connections=len(bodies_by_agent) + 5)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def agent(name: str, bodies: list[dict]) -> list[int]:
            statuses = []
            for body in bodies:
                response = await client.post(
                    f"/api/shards/{shard_id}/commit", json=body, headers=headers(key, name)
                )
                statuses.append(response.status_code)
            return statuses

        results = await asyncio.gather(*(agent(n, b) for n, b in bodies_by_agent.items()))
    return [status for statuses in results for status in statuses]


def test_eighty_appenders_of_fifty_items_each_lose_and_duplicate_nothing(live_server_url, live_key):
    shard_id = f"log-{uuid.uuid4().hex[:8]}"
    create(live_server_url, live_key, shard_id, "array")
    bodies = {
        f"agent-{a}": [{"append": [{"agent": a, "i": i}]} for i in range(50)] for a in range(80)
    }
    statuses = asyncio.run(swarm(live_server_url, live_key, shard_id, bodies))
    assert Counter(statuses) == {200: 4000}
    shard = httpx.get(
        f"{live_server_url}/api/shards/{shard_id}", headers=headers(live_key, "auditor")
    ).json()
    items = [(item["agent"], item["i"]) for item in shard["value"]]
    assert len(items) == 4000
    assert set(items) == {(a, i) for a in range(80) for i in range(50)}  # each exactly once
    assert shard["version"] == 4001
    for a in range(80):  # each agent's own appends keep their order
        assert [i for agent, i in items if agent == a] == list(range(50))


def test_fifty_agents_writing_disjoint_map_keys_all_survive(live_server_url, live_key):
    shard_id = f"map-{uuid.uuid4().hex[:8]}"
    create(live_server_url, live_key, shard_id, "map", {"untouched": "yes", "doomed": 1})
    bodies = {
        f"agent-{a}": [{"new_value": {f"k{a}-{i}": a * 100 + i}} for i in range(4)]
        for a in range(50)
    }
    statuses = asyncio.run(swarm(live_server_url, live_key, shard_id, bodies))
    assert Counter(statuses) == {200: 200}
    deleted = httpx.post(
        f"{live_server_url}/api/shards/{shard_id}/commit",
        json={"new_value": {"doomed": None}},
        headers=headers(live_key, "janitor"),
    )
    assert deleted.status_code == 200
    value = httpx.get(
        f"{live_server_url}/api/shards/{shard_id}", headers=headers(live_key, "x")
    ).json()["value"]
    expected = {f"k{a}-{i}": a * 100 + i for a in range(50) for i in range(4)} | {
        "untouched": "yes"
    }
    assert value == expected


def test_concurrent_text_deltas_converge_to_one_text_with_every_insert(live_server_url, live_key):
    shard_id = f"text-{uuid.uuid4().hex[:8]}"
    create(live_server_url, live_key, shard_id, "text", "base")
    tags = {f"agent-{a}": [f"<{a}.{i}>" for i in range(5)] for a in range(20)}
    bodies = {
        name: [{"delta": [{"retain": 2}, {"insert": tag}]} for tag in agent_tags]
        for name, agent_tags in tags.items()
    }
    statuses = asyncio.run(swarm(live_server_url, live_key, shard_id, bodies))
    assert Counter(statuses) == {200: 100}
    text = httpx.get(
        f"{live_server_url}/api/shards/{shard_id}", headers=headers(live_key, "x")
    ).json()["value"]
    for agent_tags in tags.values():
        for tag in agent_tags:
            assert text.count(tag) == 1
    assert text.startswith("ba") and text.endswith("se")
    assert len(text) == len("base") + sum(len(t) for ts in tags.values() for t in ts)


def test_appends_acknowledged_before_a_sigkill_survive_a_restart(live_key):
    shard_id = f"crash-{uuid.uuid4().hex[:8]}"
    proc, url = start_server(server_env())
    create(url, live_key, shard_id, "array")
    acknowledged: list[int] = []
    stop = threading.Event()

    def appender() -> None:
        with httpx.Client(base_url=url, timeout=5) as client:
            n = 0
            while not stop.is_set():
                try:
                    response = client.post(
                        f"/api/shards/{shard_id}/commit",
                        json={"append": [n]},
                        headers=headers(live_key, "appender"),
                    )
                except httpx.TransportError:
                    return  # the server is gone: whatever was unacknowledged may be lost
                if response.status_code == 200:
                    acknowledged.append(n)
                n += 1

    threads = [threading.Thread(target=appender) for _ in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while len(acknowledged) < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stop.set()
    for thread in threads:
        thread.join()
    assert len(acknowledged) >= 100

    proc, url = start_server(server_env())
    try:
        value = httpx.get(f"{url}/api/shards/{shard_id}", headers=headers(live_key, "x")).json()[
            "value"
        ]
    finally:
        stop_server(proc)
    survivors = Counter(value)
    missing = [n for n in acknowledged if survivors[n] < acknowledged.count(n)]
    assert missing == []


def test_two_server_processes_appending_to_one_shard_keep_one_document(live_key):
    """Each process caches the Doc; the version check against the row must make
    every process see the other's appends."""
    shard_id = f"shared-{uuid.uuid4().hex[:8]}"
    servers = [start_server(server_env()), start_server(server_env())]
    try:
        urls = [url for _, url in servers]
        create(urls[0], live_key, shard_id, "array")

        async def appender(n: int) -> list[int]:
            statuses = []
            async with httpx.AsyncClient(timeout=60) as client:
                for i in range(30):
                    url = urls[(n + i) % 2]  # alternate processes on every append
                    response = await client.post(
                        f"{url}/api/shards/{shard_id}/commit",
                        json={"append": [[n, i]]},
                        headers=headers(live_key, f"agent-{n}"),
                    )
                    statuses.append(response.status_code)
            return statuses

        async def run() -> list[list[int]]:
            return await asyncio.gather(*(appender(n) for n in range(10)))

        statuses = [s for per_agent in asyncio.run(run()) for s in per_agent]
        assert Counter(statuses) == {200: 300}
        seen = [
            httpx.get(f"{url}/api/shards/{shard_id}", headers=headers(live_key, "x")).json()
            for url in urls
        ]
    finally:
        for proc, _ in servers:
            stop_server(proc)
    assert seen[0] == seen[1]
    assert seen[0]["version"] == 301
    assert sorted(map(tuple, seen[0]["value"])) == [(n, i) for n in range(10) for i in range(30)]
