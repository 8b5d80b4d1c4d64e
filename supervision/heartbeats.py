"""Heartbeats of the Celery worker and beat, and what /api/health makes of them.

A heartbeat is evidence of the job, not of a live process: the worker beats
when it has *run* a task (``task_postrun``, in the process that ran it), beat
when it has *published* one (``after_task_publish``, in beat's thread). Beat
publishes the lease sweep every second, so both beat about once a second while
the pair works; a worker that is alive but consumes nothing goes stale."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import Heartbeat, Role

logger = logging.getLogger(__name__)
# At most one heartbeat write per process per this many seconds.
WRITE_EVERY_SECONDS = 1.0

_last_write: dict[str, float] = {}
# The threads beat runs in: its own process's main thread, or a worker's beat
# thread (make run: `celery worker --beat-thread`).
_beat_threads: set[int] = set()


def heartbeat_record(*, role: Role, at: datetime | None = None) -> None:
    """The role did its job now: refresh ``last_seen`` and clear ``down_since``."""
    _upsert(role, last_seen=at or timezone.now(), down_since=None)


def heartbeat_mark_down(*, role: Role, at: datetime | None = None) -> None:
    """The supervisor saw the role's process die (its process group is already killed)."""
    _upsert(role, down_since=at or timezone.now())


def _upsert(role: Role, **fields: Any) -> None:
    if Heartbeat.objects.filter(role=role).update(**fields):
        return
    try:
        with transaction.atomic():
            Heartbeat.objects.create(role=role, **fields)
    except IntegrityError:  # created by another process in between
        Heartbeat.objects.filter(role=role).update(**fields)


@dataclass(frozen=True)
class RoleHealth:
    status: str  # "ok", "stale", "down" or "missing"
    age_seconds: float | None  # since the last heartbeat; None if never seen

    def as_dict(self) -> dict[str, Any]:
        age = None if self.age_seconds is None else round(self.age_seconds, 1)
        return {"status": self.status, "last_heartbeat_seconds_ago": age}


def heartbeat_health(*, now: datetime | None = None) -> dict[Role, RoleHealth]:
    """The health of each role from its heartbeat row (one query)."""
    now = now or timezone.now()
    stale_after = settings.ZEROLOCK_HEARTBEAT_STALE_SECONDS
    rows = {h.role: h for h in Heartbeat.objects.all()}
    result = {}
    for role in Role:
        row = rows.get(role)
        if row is None or row.last_seen is None:
            result[role] = RoleHealth("missing", None)
            continue
        age = max(0.0, (now - row.last_seen).total_seconds())
        if row.down_since is not None and row.down_since >= row.last_seen:
            status = "down"
        elif age > stale_after:
            status = "stale"
        else:
            status = "ok"
        result[role] = RoleHealth(status, age)
    return result


def _beat_throttled(role: Role) -> None:
    now = time.monotonic()
    if now - _last_write.get(role, -WRITE_EVERY_SECONDS) < WRITE_EVERY_SECONDS:
        return
    _last_write[role] = now
    try:
        heartbeat_record(role=role)
    except Exception:  # a heartbeat must never fail the task or the schedule
        logger.exception("could not record the %s heartbeat", role)


def _on_task_postrun(**kwargs: Any) -> None:
    _beat_throttled(Role.WORKER)


def _on_beat_init(**kwargs: Any) -> None:
    _beat_threads.add(threading.get_ident())


def _on_after_task_publish(**kwargs: Any) -> None:
    # Only beat's own publishing counts as its heartbeat, not a task the worker
    # around a beat thread publishes.
    if threading.get_ident() in _beat_threads:
        _beat_throttled(Role.BEAT)


def connect_celery_signals() -> None:
    from celery.signals import after_task_publish, beat_init, task_postrun

    task_postrun.connect(_on_task_postrun, dispatch_uid="zerolock-worker-heartbeat")
    beat_init.connect(_on_beat_init, dispatch_uid="zerolock-beat-role")
    after_task_publish.connect(_on_after_task_publish, dispatch_uid="zerolock-beat-heartbeat")
