"""Several server processes on Redis: a change committed through one process
reaches the subscribers and live pages of every other process, exactly once per
version, through the processes' pub/sub channel (realtime.push.PROCESS_GROUP)."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import websockets
from asgiref.sync import sync_to_async

from access.services import api_key_create
from tests.conftest import server_env, start_server, stop_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

SHARDS = [f"xp-{n}" for n in range(4)]
COMMITS_PER_WRITER = 25


@pytest.fixture
def two_servers(transactional_db):
    env = server_env() | {"REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")}
    servers = [start_server(env), start_server(env)]
    yield [url for _, url in servers]
    for proc, _ in servers:
        stop_server(proc)


def writer(url: str, key: str, shard_id: str, agent: str) -> list[int]:
    """Commits until it has made COMMITS_PER_WRITER versions; returns them."""
    made: list[int] = []
    headers = {"X-API-Key": key, "X-Agent-Id": agent}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        while len(made) < COMMITS_PER_WRITER:
            version = client.get(f"/api/shards/{shard_id}").json()["version"]
            answer = client.post(
                f"/api/shards/{shard_id}/commit",
                json={"expected_version": version, "new_value": {"by": agent}},
                headers={"Prefer": "return=minimal"},
            )
            if answer.status_code == 200:
                made.append(answer.json()["version"])
            else:
                assert answer.status_code == 409, answer.text
    return made


async def test_commits_on_one_process_reach_every_subscriber_on_the_other_exactly_once(
    two_servers,
):
    here, there = two_servers
    _, key = await sync_to_async(api_key_create)(
        name="swarm", permissions=["shard:read", "shard:write", "shard:create"]
    )
    with httpx.Client(base_url=there, headers={"X-API-Key": key, "X-Agent-Id": "setup"}) as client:
        for shard_id in SHARDS:
            created = client.post("/api/shards", json={"id": shard_id, "type": "decision"})
            assert created.status_code == 201, created.text
    ws_url = here.replace("http", "ws") + "/ws/agents/"
    async with websockets.connect(
        ws_url, additional_headers={"X-API-Key": key, "X-Agent-Id": "watcher"}
    ) as watcher:
        await watcher.send(json.dumps({"type": "subscribe", "shard_ids": SHARDS}))
        assert json.loads(await watcher.recv())["type"] == "subscribed"
        # Two writers per shard, one on each process, racing: versions are made
        # on both, and every one of them must be pushed from "there" and "here".
        jobs = [
            (url, shard_id, f"w-{i}") for i, shard_id in enumerate(SHARDS) for url in two_servers
        ]
        with ThreadPoolExecutor(len(jobs)) as pool:
            made = await asyncio.gather(
                *(
                    asyncio.wrap_future(pool.submit(writer, url, key, shard_id, agent))
                    for url, shard_id, agent in jobs
                )
            )
        expected = Counter(
            (shard_id, v)
            for (_, shard_id, _), versions in zip(jobs, made, strict=True)
            for v in versions
        )
        heard: Counter = Counter()
        while sum(heard.values()) < sum(expected.values()):
            try:
                frame = json.loads(await asyncio.wait_for(watcher.recv(), timeout=10))
            except TimeoutError:
                break
            assert frame["type"] == "invalidate", frame
            heard[(frame["shard_id"], frame["version"])] += 1
    assert heard == expected  # none lost, none twice
    assert len(expected) == len(SHARDS) * 2 * COMMITS_PER_WRITER
