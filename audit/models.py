from __future__ import annotations

from datetime import datetime
from typing import Protocol

from django.db import models
from django.utils import timezone

from common.prefixes import scopes_q


class ShardLike(Protocol):
    """What a history needs of a shard (the audit log does not know the Shard model)."""

    id: str
    created_at: datetime


class AuditQuerySet(models.QuerySet):
    def history_of(self, shard: ShardLike) -> AuditQuerySet:
        """Applied versions of this incarnation of the shard, oldest first."""
        return self.filter(
            shard_id=shard.id,
            action__in=[
                AuditAction.SHARD_CREATE,
                AuditAction.SHARD_COMMIT,
                # A lease's end writes a version too (what it held is removed).
                AuditAction.LEASE_RELEASED_PATH,
            ],
            created_at__gte=shard.created_at,
        ).order_by("version_after")

    def within_scopes(self, prefixes: list[str]) -> AuditQuerySet:
        """Entries about shards a key scoped to these prefixes may see; a scoped
        key sees no entry without a shard (key changes, auth failures)."""
        return self.filter(scopes_q("shard_id", prefixes)) if prefixes else self

    def since(self, when: datetime | None) -> AuditQuerySet:
        return self.filter(created_at__gte=when) if when else self


class AuditAction(models.TextChoices):
    SHARD_CREATE = "shard.create"
    SHARD_COMMIT = "shard.commit"
    SHARD_COMMIT_REJECTED = "shard.commit_rejected"
    SHARD_DELETE = "shard.delete"
    KEY_CREATE = "key.create"
    KEY_REVOKE = "key.revoke"
    KEY_CHANGE = "key.change"
    AUTH_FAILURE = "auth.failure"
    # A console or admin login refused for a cool-down (access/logins.py).
    LOGIN_LOCKED_OUT = "login.locked_out"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_APPROVED = "approval.approved"
    APPROVAL_REJECTED = "approval.rejected"
    APPROVAL_CHANGES_REQUESTED = "approval.changes_requested"
    APPROVAL_EXPIRED = "approval.expired"
    # No decision in time: the route's escalation group may now decide too.
    APPROVAL_ESCALATED = "approval.escalated"
    APPROVAL_COMMITTED = "approval.committed"
    APPROVAL_COMMIT_FAILED = "approval.commit_failed"
    APPROVAL_POLICY_CREATED = "approval.policy_created"
    APPROVAL_POLICY_DELETED = "approval.policy_deleted"
    LEASE_GRANTED = "lease.granted"
    LEASE_ENDED = "lease.ended"
    LEASE_RELEASED_PATH = "lease.released_path"
    RESERVATION_CREATED = "reservation.created"
    RESERVATION_ENDED = "reservation.ended"


class AuditEntry(models.Model):
    """One append-only audit record, chained to the previous one by SHA-256.

    The entry's id is the global revision: it rises by one per audited event.
    Applied shard versions live here too (with their value), so shard history is
    a view of this log rather than a second copy of it.
    """

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    action = models.CharField(max_length=32, choices=AuditAction.choices, db_index=True)
    agent_id = models.CharField(max_length=128, blank=True, db_index=True)
    key_prefix = models.CharField(max_length=16, blank=True)
    shard_id = models.CharField(max_length=128, blank=True, db_index=True)
    version_before = models.PositiveBigIntegerField(null=True, blank=True)
    version_after = models.PositiveBigIntegerField(null=True, blank=True)
    value = models.JSONField(null=True, blank=True)
    value_hash = models.CharField(max_length=64, blank=True)
    details = models.JSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64)
    entry_hash = models.CharField(max_length=64, unique=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        db_table = "shards_auditentry"
        ordering = ["id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["shard_id", "version_after"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.action} {self.shard_id}"


class AuditHead(models.Model):
    """The single row every audited write locks first: it serialises the hash chain
    (and so every write) in one order, which also rules out lock-order deadlocks."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_hash = models.CharField(max_length=64, default="0" * 64)

    class Meta:
        db_table = "shards_audithead"

    def __str__(self) -> str:
        return self.last_hash
