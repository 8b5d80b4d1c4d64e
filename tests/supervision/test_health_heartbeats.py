"""/api/health reads the worker's and beat's heartbeats (written by other
processes) and says "degraded" with 200 when either is missing, stale or down:
the node still serves, so a load balancer keeps it (issue 16, finding 4)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from supervision.heartbeats import heartbeat_mark_down, heartbeat_record
from supervision.models import Role

pytestmark = pytest.mark.django_db


def health(client) -> tuple[int, dict]:
    response = client.get("/api/health")
    return response.status_code, response.json()


def test_a_node_whose_worker_and_beat_never_beat_is_degraded_but_answers_200(client):
    status, body = health(client)

    assert status == 200
    assert body["status"] == "degraded"
    assert body["checks"]["worker"] == body["checks"]["beat"] == "missing"
    assert body["worker"] == {"status": "missing", "last_heartbeat_seconds_ago": None}


def test_a_worker_silent_longer_than_the_stale_delay_shows_stale_with_its_age(client, settings):
    settings.ZEROLOCK_HEARTBEAT_STALE_SECONDS = 15
    with time_machine.travel(timezone.now() - timedelta(seconds=40), tick=False):
        heartbeat_record(role=Role.WORKER)
    heartbeat_record(role=Role.BEAT)

    status, body = health(client)

    assert status == 200
    assert (body["status"], body["checks"]["worker"], body["checks"]["beat"]) == (
        "degraded",
        "stale",
        "ok",
    )
    assert 40 <= body["worker"]["last_heartbeat_seconds_ago"] < 60


def test_a_worker_the_supervisor_saw_die_is_down_at_once_until_its_successor_beats(client):
    heartbeat_record(role=Role.WORKER)
    heartbeat_record(role=Role.BEAT)
    heartbeat_mark_down(role=Role.WORKER)

    assert health(client)[1]["checks"]["worker"] == "down"

    heartbeat_record(role=Role.WORKER)  # the restarted worker ran a task
    status, body = health(client)
    assert (status, body["status"], body["checks"]["worker"]) == (200, "ok", "ok")
