"""What one request costs the database, on the hot endpoints: a read is one
query, a commit one short transaction. A regression here is a slower server for
every agent, so the budgets are exact ceilings, checked on both databases.

On a server, deliveries, commit metrics and refusals are written behind: one
batch per period for all requests, by a thread of their own. The suite writes
them inline (so tests can read them at once); they are left out of a request's
count here, and their batching is what bench/ measures."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from coordination.leases import next_expiry
from metrics import record

pytestmark = pytest.mark.django_db

WRITTEN_BEHIND = (
    "shards_delivery",
    "shards_commitsample",
    "shards_metriccounter",
    "shards_socketgauge",
)


def statements(captured: CaptureQueriesContext) -> list[str]:
    """A request's own statements. Transaction control is left out: the test's
    transaction turns BEGIN/COMMIT into savepoints, and PostgreSQL's driver does
    not report them at all."""
    sql = [q["sql"] for q in captured.captured_queries]
    return [
        s
        for s in sql
        if not any(table in s for table in WRITTEN_BEHIND)
        and not s.startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "BEGIN", "COMMIT"))
    ]


@contextmanager
def at_most(budget: int) -> Iterator[None]:
    """The request's own queries, at most ``budget`` of them."""
    with CaptureQueriesContext(connection) as captured:
        yield
    own = statements(captured)
    assert len(own) <= budget, "\n".join(own)


@pytest.fixture
def warm(planner, monkeypatch):
    """The planner has one decision and one additive shard, and has been seen
    once: what later requests cost is the steady state. Caches that re-read the
    database now and then (the soonest lease expiry, for other processes' leases;
    the socket count) are held still, so each budget counts one request's own
    queries, not which second it fell in."""
    planner.post(
        "/api/shards", {"id": "hot", "type": "decision", "initial_value": 0}, format="json"
    )
    planner.post(
        "/api/shards",
        {"id": "log", "type": "additive", "crdt_type": "array", "initial_value": []},
        format="json",
    )
    assert planner.get("/api/shards/hot").status_code == 200
    monkeypatch.setattr(next_expiry, "REFRESH_SECONDS", 3600.0)
    monkeypatch.setattr(record, "CONNECTIONS_CACHE_SECONDS", 3600.0)
    return planner


def test_reading_a_shard_costs_one_query(warm):
    with at_most(1):
        assert warm.get("/api/shards/hot").status_code == 200


def test_a_commit_is_one_rules_read_and_one_short_transaction(warm):
    # Rules read, then in one transaction: audit head; conditional UPDATE; audit
    # INSERT; head UPDATE.
    with at_most(5):
        response = warm.post(
            "/api/shards/hot/commit", {"expected_version": 1, "new_value": 1}, format="json"
        )
    assert response.status_code == 200, response.content


def test_a_stale_commit_is_refused_before_the_write_lock(warm):
    warm.post("/api/shards/hot/commit", {"expected_version": 1, "new_value": 1}, format="json")
    with CaptureQueriesContext(connection) as captured:
        response = warm.post(
            "/api/shards/hot/commit", {"expected_version": 1, "new_value": 2}, format="json"
        )
    assert response.status_code == 409
    # Rules read, then the current version and value for the refusal; no write.
    # (The refusal's audit entry is batched on a server; inline here.)
    shard_statements = [s for s in statements(captured) if '"shards_shard"' in s]
    assert len(shard_statements) == 2 and all(s.startswith("SELECT") for s in shard_statements)


def test_an_append_is_one_rules_read_and_one_short_transaction(
    warm, django_capture_on_commit_callbacks
):
    # After a commit the process keeps the shard's Doc (an after-commit step):
    # the next append checks its version and does not rebuild it.
    with django_capture_on_commit_callbacks(execute=True):
        warm.post("/api/shards/log/commit", {"append": ["warm"]}, format="json")
    # Rules read, then in one transaction: audit head; version check;
    # conditional UPDATE; audit INSERT; head UPDATE; update-log INSERT.
    with at_most(7):
        response = warm.post("/api/shards/log/commit", {"append": ["x"]}, format="json")
    assert response.status_code == 200, response.content


def test_a_claim_is_one_rules_read_and_one_short_transaction(warm):
    warm.post(
        "/api/shards",
        {"id": "queue", "type": "decision", "initial_value": {"t1": {"status": "pending"}}},
        format="json",
    )
    # Rules read, then in one transaction: audit head; the queue read under the
    # lock; conditional UPDATE; audit INSERT; head UPDATE.
    with at_most(6):
        response = warm.post(
            "/api/shards/queue/claim",
            {"where": {"status": "pending"}, "set": {"status": "claimed"}},
            format="json",
        )
    assert response.status_code == 200, response.content
