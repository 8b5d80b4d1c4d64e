from __future__ import annotations

import re
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

LEASE_ID_REGEX = r"^lse_[0-9a-f]{24}$"


def new_lease_id() -> str:
    return f"lse_{secrets.token_hex(12)}"  # LEASE_ID_REGEX


def is_lease_id(text: str) -> bool:
    return re.fullmatch(LEASE_ID_REGEX, text) is not None


class LeaseQuerySet(models.QuerySet):
    """The one definition of a lease's state: ``unended`` (not revoked nor
    swept), ``live`` (unended and before its time) and ``due`` (unended, past
    its time: the sweep ends it)."""

    def unended(self) -> LeaseQuerySet:
        return self.filter(revoked=False)

    def live(self) -> LeaseQuerySet:
        return self.unended().filter(expires_at__gt=timezone.now())

    def due(self) -> LeaseQuerySet:
        return self.unended().filter(expires_at__lte=timezone.now())


class Lease(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_lease_id)
    holder = models.CharField(max_length=128)
    key_prefix = models.CharField(max_length=16, blank=True)
    ttl_seconds = models.PositiveIntegerField()
    expires_at = models.DateTimeField(db_index=True)
    fence = models.PositiveBigIntegerField(default=0)
    revoked = models.BooleanField(default=False)
    # Kept alive by its holder's open agent sockets (coordination.sessions), not by
    # keep-alive calls: it ends ttl_seconds after the holder's last socket is gone.
    session = models.BooleanField(default=False, db_default=False)

    objects = LeaseQuerySet.as_manager()

    class Meta:
        db_table = "shards_lease"

    def __str__(self) -> str:
        return f"{self.id} ({self.holder})"


class LeaseBinding(models.Model):
    """A path a lease holds: removed from the shard when the lease ends."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="bindings")
    shard_id = models.CharField(max_length=128)
    # The shard incarnation the path was written in: the lease's end touches that
    # incarnation only, never a shard re-created under the same id.
    incarnation = models.UUIDField(null=True)
    path = models.JSONField()

    class Meta:
        db_table = "shards_leasebinding"

    def __str__(self) -> str:
        return f"{self.lease_id}: {self.shard_id} {self.path}"


class IdempotencyRecord(models.Model):
    """A write's stored response, replayed for a retry with the same key and body."""

    scope = models.CharField(max_length=64)  # SHA-256 of the key prefix and agent id
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField(null=True)  # None while in progress
    body = models.BinaryField(null=True)
    content_type = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # The request running it now (a random token; a retry that takes the key over
    # replaces it), when it took it, and whether its write went in: set by the
    # write's own transaction (common.applied), so a crash cannot lose it.
    # Defaults in the database too: a server of the release before, still running
    # during an upgrade, inserts rows that name none of these.
    holder = models.CharField(max_length=32, blank=True, default="", db_default="")
    reserved_at = models.DateTimeField(default=timezone.now, db_default=Now())
    applied = models.BooleanField(default=False, db_default=False)

    class Meta:
        db_table = "shards_idempotencyrecord"
        constraints = [models.UniqueConstraint(fields=["scope", "key"], name="one_record_per_key")]

    def __str__(self) -> str:
        return f"{self.scope}/{self.key} -> {self.status}"


class AgentSessionQuerySet(models.QuerySet):
    def live(self, now: datetime | None = None) -> AgentSessionQuerySet:
        """Seen within ZEROLOCK_SESSION_TIMEOUT_SECONDS: a process that died without
        closing its sockets (kill -9) stops renewing its rows, and they drop out."""
        now = now or timezone.now()
        return self.filter(
            last_seen__gt=now - timedelta(seconds=settings.ZEROLOCK_SESSION_TIMEOUT_SECONDS)
        )

    def stale(self, now: datetime | None = None) -> AgentSessionQuerySet:
        now = now or timezone.now()
        return self.filter(
            last_seen__lte=now - timedelta(seconds=settings.ZEROLOCK_SESSION_TIMEOUT_SECONDS)
        )


class AgentSession(models.Model):
    """One open agent socket (/ws/agents/ with an agent id): who, in which server
    process, since when. Its process renews ``last_seen`` while it is open and
    deletes the row when it closes (coordination.sessions)."""

    key_prefix = models.CharField(max_length=16)
    agent_id = models.CharField(max_length=128)
    process = models.CharField(max_length=128)
    connected_since = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now, db_index=True)

    objects = AgentSessionQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["agent_id", "key_prefix"])]

    def __str__(self) -> str:
        return f"{self.agent_id} ({self.key_prefix}) on {self.process}"


RESERVATION_ID_REGEX = r"^rsv_[0-9a-f]{24}$"


def new_reservation_id() -> str:
    return f"rsv_{secrets.token_hex(12)}"  # RESERVATION_ID_REGEX


def is_reservation_id(text: str) -> bool:
    return re.fullmatch(RESERVATION_ID_REGEX, text) is not None


class ReservationQuerySet(models.QuerySet):
    """The one definition of a reservation's state. ``live``: not ended (released,
    or recorded as ended by a sweep), before its own time if it has one, and, if
    bound to a lease, while that lease is live. Every answer filters by it, so a
    reservation is gone the moment its time or its lease is, whether or not a
    sweep has written its end yet. ``due``: past its own time, its end not yet
    recorded."""

    def live(self, now: datetime | None = None) -> ReservationQuerySet:
        now = now or timezone.now()
        return self.filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now),
            models.Q(lease__isnull=True)
            | models.Q(lease__revoked=False, lease__expires_at__gt=now),
            ended=False,
        )

    def due(self, now: datetime | None = None) -> ReservationQuerySet:
        return self.filter(ended=False, expires_at__lte=now or timezone.now())


class Reservation(models.Model):
    """Glob patterns of paths an agent says it is working on (coordination.reservations):
    an exclusive one refuses every other agent's overlapping reservation."""

    id = models.CharField(primary_key=True, max_length=40, default=new_reservation_id)
    holder = models.CharField(max_length=128)
    key_prefix = models.CharField(max_length=16)
    patterns = models.JSONField()
    exclusive = models.BooleanField(default=True)
    reason = models.CharField(max_length=500, blank=True)
    # Ends with its lease (a session lease: with its agent's sockets), if bound.
    lease = models.ForeignKey(
        Lease, null=True, blank=True, on_delete=models.CASCADE, related_name="reservations"
    )
    ttl_seconds = models.PositiveIntegerField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # The creation's global revision: a later reservation always has a larger one.
    fence = models.PositiveBigIntegerField(default=0, db_index=True)
    ended = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ReservationQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["holder", "key_prefix"])]

    def __str__(self) -> str:
        return f"{self.id} ({self.holder}: {', '.join(self.patterns)})"
