"""/api/metrics and /api/metrics/ws: real counts from the database."""

from __future__ import annotations

import pytest

from access.identity import Actor
from approvals.services import approval_request
from metrics.models import CommitSample, MetricCounter
from metrics.record import (
    bucket_percentile,
    counters,
    push_delay_counter,
    push_delay_summary,
    recorder,
    window,
)

pytestmark = pytest.mark.django_db


def test_commits_conflicts_latency_and_hot_shards_are_counted(planner):
    for shard_id in ("hot", "cold"):
        planner.post(
            "/api/shards", {"id": shard_id, "type": "decision", "initial_value": 0}, format="json"
        )
    for version in range(1, 6):
        assert (
            planner.post(
                "/api/shards/hot/commit",
                {"expected_version": version, "new_value": version},
                format="json",
            ).status_code
            == 200
        )
    stale = planner.post(
        "/api/shards/hot/commit", {"expected_version": 1, "new_value": 9}, format="json"
    )
    assert stale.status_code == 409
    planner.post("/api/shards/cold/commit", {"expected_version": 1, "new_value": 1}, format="json")

    body = planner.get("/api/metrics").json()
    minute = body["last_minute"]
    assert (minute["commits"], minute["conflicts"]) == (6, 1)
    assert minute["commits_per_second"] == pytest.approx(6 / 60, abs=0.001)
    assert minute["hot_shards"][0] == {"shard_id": "hot", "commits": 5, "conflicts": 1}
    assert minute["hot_shards"][1]["shard_id"] == "cold"
    latency = minute["latency_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"]
    assert body["last_hour"]["commits"] == 6
    assert body["since_start"]["commits"] == 6 and body["since_start"]["conflicts"] == 1
    assert set(body["approvals"]) == {
        "pending",
        "approved",
        "approved_stale",
        "rejected",
        "changes_requested",
        "expired",
        "committed",
    }


def test_a_scoped_key_sees_only_hot_shards_inside_its_scopes(planner, make_key, client_for):
    for shard_id in ("team.plan", "other.secret", "other.more"):
        planner.post(
            "/api/shards", {"id": shard_id, "type": "decision", "initial_value": 0}, format="json"
        )
        planner.post(
            f"/api/shards/{shard_id}/commit", {"expected_version": 1, "new_value": 1}, format="json"
        )
    scoped = client_for(make_key("shard:read", shard_prefixes=["team."]), agent=None)
    body = scoped.get("/api/metrics").json()
    for window_name in ("last_minute", "last_hour"):
        assert [h["shard_id"] for h in body[window_name]["hot_shards"]] == ["team.plan"]
    everyone = planner.get("/api/metrics").json()["last_minute"]["hot_shards"]
    assert {h["shard_id"] for h in everyone} == {"team.plan", "other.secret", "other.more"}


def test_approvals_are_counted_by_status(planner):
    planner.post(
        "/api/shards",
        {"id": "vault", "type": "decision", "initial_value": 0, "reversible": False},
        format="json",
    )
    for _ in range(2):
        approval_request(
            actor=Actor("x"),
            shard_id="vault",
            proposed_value=1,
            expected_version=1,
            description="d",
        )
    assert planner.get("/api/metrics").json()["approvals"]["pending"] == 2


def test_old_samples_fall_out_of_the_window():
    from datetime import timedelta

    from django.utils import timezone

    CommitSample.objects.create(
        at=timezone.now() - timedelta(minutes=5), shard_id="s", latency_ms=3, outcome="ok"
    )
    recorder.commit(shard_id="s", latency_ms=4, outcome="ok")
    assert window(60)["commits"] == 1
    assert window(3600)["commits"] == 2
    assert MetricCounter.objects.get(name="commits").value == 1


def test_ws_metrics_need_a_key(client_for, make_key):
    assert client_for(None).get("/api/metrics/ws").status_code == 401
    body = client_for(make_key("shard:read")).get("/api/metrics/ws").json()
    assert set(body) >= {
        "messages_sent",
        "naive_broadcast_messages",
        "cost_savings_percent",
        "connections",
        "subscriptions",
        "push_delay_ms",
    }


def test_a_fanout_is_counted_in_the_first_bucket_that_holds_its_delay():
    assert push_delay_counter(0.3) == "push_delay_ms_le_1"
    assert push_delay_counter(1.0) == "push_delay_ms_le_1"
    assert push_delay_counter(19.9) == "push_delay_ms_le_20"
    assert push_delay_counter(20.1) == "push_delay_ms_le_50"
    assert push_delay_counter(5000) == "push_delay_ms_over"


def test_the_push_delay_percentiles_are_the_bounds_of_their_buckets():
    # 98 fan-outs within 5 ms, 2 within 50: p50 is 5, p99 is 50.
    recorder.count("push_delay_ms_le_5", 98)
    recorder.count("push_delay_ms_le_50", 2)
    summary = push_delay_summary(counters())
    assert summary["fanouts"] == 100
    assert summary["buckets"]["5"] == 98 and summary["buckets"]["over"] == 0
    assert (summary["p50"], summary["p99"]) == (5, 50)
    assert bucket_percentile([0] * 11, 99) is None
    assert bucket_percentile([0] * 10 + [1], 50) is None  # past the last bound
