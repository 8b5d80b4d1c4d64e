"""Shared rate-limit counts (access.ratelimit.CacheCounts) reach the cache in
batches far below a limit and on every request near it. Two CacheCounts stand for
two server processes; the cache they share is Django's (Redis on the PostgreSQL +
Redis configuration, this process's memory on the embedded one)."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from access import ratelimit
from access.ratelimit import BATCH, CacheCounts, sliding_window


class CountingCounts(CacheCounts):
    """A process's counts that also count their round trips to the cache."""

    def __init__(self) -> None:
        super().__init__()
        self.trips = 0

    def _add(self, identity: str, window: int, amount: int) -> tuple[int, int]:
        self.trips += 1
        return super()._add(identity, window, amount)


def _passes(counts: CacheCounts, identity: str, window: int, limit: int) -> bool:
    previous, current = counts.hit(identity, window, limit)
    state = sliding_window(limit=limit, previous=previous, current=current, elapsed=0)
    if not state.allowed:
        counts.undo(identity, window)
    return state.allowed


@pytest.fixture
def identity(request) -> str:
    name = f"test-batches-{request.node.name}-{time.time_ns()}"
    yield name
    for window in (10**6, 10**6 - 1):
        cache.delete(CacheCounts._key(name, window))


def test_far_below_its_limit_a_busy_key_costs_one_round_trip_per_batch(identity):
    agent = CountingCounts()
    allowed = [_passes(agent, identity, 10**6, limit=100_000) for _ in range(400)]

    assert all(allowed)
    assert agent.trips <= 400 // BATCH + 1
    # Nothing is lost: what the cache holds plus what waits for the next trip is all of it.
    held = agent._pending[(identity, 10**6)].unsent
    assert int(cache.get(CacheCounts._key(identity, 10**6))) + held == 400


def test_one_process_stops_exactly_at_the_limit(identity):
    agent = CountingCounts()
    allowed = [_passes(agent, identity, 10**6, limit=120) for _ in range(150)]

    assert allowed == [True] * 120 + [False] * 30
    assert int(cache.get(CacheCounts._key(identity, 10**6))) == 120


def test_two_processes_alternating_on_a_small_limit_share_it_exactly(identity):
    first, second = CountingCounts(), CountingCounts()
    allowed = [_passes(first if n % 2 else second, identity, 10**6, limit=30) for n in range(40)]
    assert allowed == [True] * 30 + [False] * 10


def test_two_processes_on_a_large_limit_pass_it_by_no_more_than_their_batches(identity):
    first, second = CountingCounts(), CountingCounts()
    limit = 1_000
    allowed = sum(
        _passes(first if n % 3 else second, identity, 10**6, limit=limit) for n in range(1_300)
    )
    assert limit <= allowed <= limit + 2 * 2 * (BATCH - 1)
    assert first.trips + second.trips < 1_300


def test_a_quiet_key_is_sent_within_sync_seconds(identity, monkeypatch):
    agent = CountingCounts()
    monkeypatch.setattr(ratelimit, "SYNC_SECONDS", 0.05)
    _passes(agent, identity, 10**6, limit=100_000)
    _passes(agent, identity, 10**6, limit=100_000)
    assert agent.trips == 1
    time.sleep(0.06)
    _passes(agent, identity, 10**6, limit=100_000)
    assert agent.trips == 2
    assert int(cache.get(CacheCounts._key(identity, 10**6))) == 3
