from __future__ import annotations

from django.db import models


class Role(models.TextChoices):
    WORKER = "worker"
    BEAT = "beat"


class Heartbeat(models.Model):
    """When a Celery role last did its job, readable by every server process.

    ``last_seen``: the worker finished a task / beat published one.
    ``down_since``: the supervisor saw the process die (cleared by its successor's
    first heartbeat), so /api/health says so at once instead of after the stale delay."""

    role = models.CharField(primary_key=True, max_length=16, choices=Role.choices)
    last_seen = models.DateTimeField(null=True)
    down_since = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"{self.role} last seen {self.last_seen}"
