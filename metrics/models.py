from __future__ import annotations

from django.db import models

from common.prefixes import scopes_q


class CommitSampleQuerySet(models.QuerySet):
    def within_scopes(self, prefixes: list[str]) -> CommitSampleQuerySet:
        """Samples of shards a key scoped to these id prefixes may see (none: all)."""
        return self.filter(scopes_q("shard_id", prefixes)) if prefixes else self


class CommitSample(models.Model):
    """One commit attempt as the server saw it: the metrics' raw material."""

    OK, CONFLICT = "ok", "conflict"

    at = models.DateTimeField(db_index=True)
    shard_id = models.CharField(max_length=128)
    latency_ms = models.FloatField()
    outcome = models.CharField(max_length=8)

    objects = CommitSampleQuerySet.as_manager()

    class Meta:
        db_table = "shards_commitsample"

    def __str__(self) -> str:
        return f"{self.shard_id} {self.outcome} {self.latency_ms:.1f} ms"


class MetricCounter(models.Model):
    """A running total shared by every server process."""

    name = models.CharField(primary_key=True, max_length=64)
    value = models.BigIntegerField(default=0)

    class Meta:
        db_table = "shards_metriccounter"

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


class SocketGauge(models.Model):
    """One server process's open agent sockets, refreshed while it lives."""

    process = models.CharField(primary_key=True, max_length=128)
    connections = models.IntegerField(default=0)
    subscriptions = models.IntegerField(default=0)
    shard_subscribers = models.JSONField(default=dict)
    updated_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "shards_socketgauge"

    def __str__(self) -> str:
        return f"{self.process}: {self.connections} sockets"
