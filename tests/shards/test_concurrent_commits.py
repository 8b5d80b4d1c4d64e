"""Layer 1 under real concurrency: many agents against a live web server over
real sockets. Counts what was lost or duplicated; both must be zero."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter

import httpx
import pytest

from access.services import api_key_create

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

AGENTS = 50


@pytest.fixture
def live_key(transactional_db) -> str:
    _, raw = api_key_create(name="swarm", permissions=["shard:read", "shard:write", "shard:create"])
    return raw


def _client(url: str, key: str, agent: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, headers={"X-API-Key": key, "X-Agent-Id": agent}, timeout=60
    )


async def _create(url: str, key: str, shard_id: str, value) -> None:
    async with _client(url, key, "creator") as client:
        response = await client.post(
            "/api/shards", json={"id": shard_id, "type": "decision", "initial_value": value}
        )
        assert response.status_code == 201, response.text


def test_fifty_agents_incrementing_one_counter_lose_no_update(live_server_url, live_key):
    shard_id = f"counter-{uuid.uuid4().hex[:8]}"
    per_agent = 20
    asyncio.run(_create(live_server_url, live_key, shard_id, 0))
    conflicts = Counter()

    async def agent(n: int) -> int:
        successes = 0
        async with _client(live_server_url, live_key, f"agent-{n}") as client:
            shard = (await client.get(f"/api/shards/{shard_id}")).json()
            version, value = shard["version"], shard["value"]
            failures_in_a_row = 0
            while successes < per_agent:
                response = await client.post(
                    f"/api/shards/{shard_id}/commit",
                    json={"expected_version": version, "new_value": value + 1},
                )
                if response.status_code == 200:
                    successes += 1
                    failures_in_a_row = 0
                    version, value = response.json()["version"], response.json()["value"]
                    continue
                assert response.status_code == 409, response.text
                error = response.json()["error"]
                assert error["code"] == "STALE_VERSION"
                conflicts[n] += 1
                failures_in_a_row += 1
                # The 409 carries the current state: that is the re-read.
                version, value = error["current_version"], error["current_value"]
                # Jittered backoff keeps 50 contenders from retrying in lockstep.
                await asyncio.sleep(random.uniform(0, min(2.0, 0.05 * 2**failures_in_a_row)))
        return successes

    async def swarm() -> list[int]:
        return await asyncio.gather(*(agent(n) for n in range(AGENTS)))

    successes = asyncio.run(swarm())
    assert sum(successes) == AGENTS * per_agent

    async def final_state():
        async with _client(live_server_url, live_key, "auditor") as client:
            shard = (await client.get(f"/api/shards/{shard_id}")).json()
            history = (await client.get(f"/api/shards/{shard_id}/history")).json()
            return shard, history

    shard, history = asyncio.run(final_state())
    assert shard["value"] == AGENTS * per_agent  # nothing lost
    assert shard["version"] == AGENTS * per_agent + 1
    versions = [entry["version"] for entry in history]
    assert versions == list(range(1, AGENTS * per_agent + 2))  # no gap, no repeat
    # Each applied version holds exactly the previous value plus one.
    assert [entry["value"] for entry in history] == list(range(0, AGENTS * per_agent + 1))
    print(f"conflicts retried: {sum(conflicts.values())}")


def test_fifty_agents_racing_for_one_version_produce_exactly_one_winner(live_server_url, live_key):
    shard_id = f"choice-{uuid.uuid4().hex[:8]}"
    asyncio.run(_create(live_server_url, live_key, shard_id, "undecided"))
    start = asyncio.Event()

    async def agent(n: int) -> httpx.Response:
        async with _client(live_server_url, live_key, f"agent-{n}") as client:
            await start.wait()
            return await client.post(
                f"/api/shards/{shard_id}/commit",
                json={"expected_version": 1, "new_value": f"plan-{n}"},
            )

    async def race() -> list[httpx.Response]:
        tasks = [asyncio.create_task(agent(n)) for n in range(AGENTS)]
        await asyncio.sleep(0.2)
        start.set()
        return await asyncio.gather(*tasks)

    responses = asyncio.run(race())
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: 1, 409: AGENTS - 1}
    winner = next(r.json() for r in responses if r.status_code == 200)
    for loser in (r.json()["error"] for r in responses if r.status_code == 409):
        assert loser["code"] == "STALE_VERSION"
        assert loser["current_version"] == 2
        assert loser["current_value"] == winner["value"]

    async def read():
        async with _client(live_server_url, live_key, "auditor") as client:
            return (await client.get(f"/api/shards/{shard_id}/history")).json()

    history = asyncio.run(read())
    assert [e["version"] for e in history] == [1, 2]
    assert history[1]["value"] == winner["value"]


def test_reads_through_the_live_server_land_in_the_delivery_log(live_server_url, live_key):
    import time

    from shards.models import Delivery

    shard_id = f"seen-{uuid.uuid4().hex[:8]}"
    asyncio.run(_create(live_server_url, live_key, shard_id, 1))

    async def readers():
        async def read(n):
            async with _client(live_server_url, live_key, f"reader-{n}") as client:
                assert (await client.get(f"/api/shards/{shard_id}")).status_code == 200

        await asyncio.gather(*(read(n) for n in range(20)))

    asyncio.run(readers())
    deadline = time.monotonic() + 10
    while Delivery.objects.filter(shard_id=shard_id).count() < 20 and time.monotonic() < deadline:
        time.sleep(0.1)
    rows = Delivery.objects.filter(shard_id=shard_id)
    assert sorted(rows.values_list("agent_id", flat=True)) == sorted(
        f"reader-{n}" for n in range(20)
    )
    assert set(rows.values_list("version", flat=True)) == {1}
