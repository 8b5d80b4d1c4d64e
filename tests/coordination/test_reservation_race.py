"""Forty agents race for overlapping path patterns against a live server: however
the requests interleave, no two live reservations of different agents conflict
(an exclusive one beside anything that overlaps it)."""

from __future__ import annotations

import asyncio
import itertools
import random

import httpx
import pytest

from access.services import api_key_create
from coordination.globs import overlap_witness
from tests.conftest import server_env, start_server, stop_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# Patterns that overlap in many ways: nested directories, stars, classes, `**`.
POOL = [
    "src/**",
    "src/*.py",
    "src/app/**",
    "src/app/*.py",
    "src/app/models.py",
    "src/[ab]pp/?odels.py",
    "**/*.py",
    "**/models.py",
    "src/lib/**/*.c",
    "docs/**",
    "docs/api.md",
    "docs/*.txt",
    "tests/**/test_*.py",
    "tests/unit/test_app.py",
    "README.md",
    "*.md",
]


def conflicting(a: dict, b: dict) -> str | None:
    """A path both reservations cover, if one is exclusive and they are another's."""
    if (a["holder"], a["key"]["prefix"]) == (b["holder"], b["key"]["prefix"]):
        return None
    if not (a["exclusive"] or b["exclusive"]):
        return None
    for x, y in itertools.product(a["patterns"], b["patterns"]):
        if (witness := overlap_witness(x, y)) is not None:
            return witness
    return None


def assert_no_two_conflict(live: list[dict]) -> None:
    for a, b in itertools.combinations(live, 2):
        witness = conflicting(a, b)
        assert witness is None, f"{a} and {b} both hold {witness!r}"


def test_forty_agents_on_two_server_processes_racing_for_overlapping_patterns_never_both_win(
    live_server_url,
):
    # Eight keys of five agents each: agents are counted by key and name.
    keys = [
        api_key_create(name=f"team {n}", permissions=["shard:read", "shard:write"])[1]
        for n in range(8)
    ]
    # A second process: within one, Django's sync views take turns on one thread,
    # so only two processes make the check-then-write race real.
    other, other_url = start_server(server_env())
    try:
        asyncio.run(race([live_server_url, other_url], keys))
    finally:
        stop_server(other)


ROUNDS = 8


async def race(urls: list[str], keys: list[str]) -> None:
    agents = [(keys[n % 8], f"agent-{n:02}") for n in range(40)]
    rng = random.Random(20261202)
    outcomes = {"granted": 0, "refused": 0}
    barrier = asyncio.Barrier(len(agents))
    held_by_round: list[list[str]] = [[] for _ in range(ROUNDS)]
    limits = httpx.Limits(max_connections=40)
    clients = [httpx.AsyncClient(base_url=url, limits=limits, timeout=60) for url in urls]

    async def agent(n: int, key: str, name: str) -> None:
        http = clients[n % 2]  # half the agents on each process
        headers = {"X-API-Key": key, "X-Agent-Id": name}
        for round_ in range(ROUNDS):
            # Each round starts from an empty field, every agent asking at once.
            await barrier.wait()
            patterns = rng.sample(POOL, rng.choice([1, 1, 2, 3]))
            body = {"patterns": patterns, "ttl_seconds": 300, "exclusive": rng.random() < 0.7}
            answer = await http.post("/api/reservations", json=body, headers=headers)
            mine = None
            if answer.status_code == 201:
                outcomes["granted"] += 1
                mine = answer.json()["reservation_id"]
                held_by_round[round_].append(mine)
            else:
                assert answer.status_code == 409, answer.text
                error = answer.json()["error"]
                assert error["code"] == "RESERVATION_CONFLICT" and error["conflicts"]
                outcomes["refused"] += 1
            await barrier.wait()
            if n == 0:
                listed = (await http.get("/api/reservations", headers=headers)).json()
                assert_no_two_conflict(listed["results"])
                # Exactly the grants of this round are live: none lost, none extra.
                ids = {r["reservation_id"] for r in listed["results"]}
                assert ids == set(held_by_round[round_])
            await barrier.wait()
            if mine is not None:
                gone = await http.delete(f"/api/reservations/{mine}", headers=headers)
                assert gone.status_code == 204, gone.text

    try:
        await asyncio.gather(*(agent(n, key, name) for n, (key, name) in enumerate(agents)))
    finally:
        for client in clients:
            await client.aclose()
    # The race was real: both outcomes happened many times.
    assert outcomes["granted"] >= 40 and outcomes["refused"] >= 40, outcomes
