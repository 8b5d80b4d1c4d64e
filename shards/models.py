from __future__ import annotations

import uuid
from datetime import datetime

from django.db import models
from django.utils import timezone

from common.prefixes import prefix_q, scopes_q


class ShardType(models.TextChoices):
    DECISION = "decision"
    ADDITIVE = "additive"


class CrdtType(models.TextChoices):
    MAP = "map"
    ARRAY = "array"
    TEXT = "text"


class OwnerPolicy(models.TextChoices):
    SINGLE_WRITER = "single-writer"
    OWNERS_ONLY = "owners-only"


class ShardQuerySet(models.QuerySet):
    def with_prefix(self, prefix: str) -> ShardQuerySet:
        return self.filter(prefix_q("id", prefix)) if prefix else self

    def of_type(self, shard_type: str) -> ShardQuerySet:
        return self.filter(type=shard_type) if shard_type else self

    def without_payload(self) -> ShardQuerySet:
        """Rules and metadata only: the value and CRDT state grow with the shard."""
        return self.defer(*Shard.PAYLOAD)

    def within_scopes(self, prefixes: list[str]) -> ShardQuerySet:
        """Shards a key scoped to these id prefixes may see (no prefixes: all)."""
        return self.filter(scopes_q("id", prefixes)) if prefixes else self


class Shard(models.Model):
    id = models.CharField(primary_key=True, max_length=128)
    type = models.CharField(max_length=16, choices=ShardType.choices)
    # null, not "", is what the contract shows for decision shards.
    crdt_type = models.CharField(  # noqa: DJ001
        max_length=16, choices=CrdtType.choices, null=True, blank=True
    )
    owner_policy = models.CharField(
        max_length=16, choices=OwnerPolicy.choices, default=OwnerPolicy.SINGLE_WRITER
    )
    owners = models.JSONField(default=list, blank=True)
    reversible = models.BooleanField(default=True)
    # How many distinct people must approve a change before it applies (quorum).
    approvals_required = models.PositiveSmallIntegerField(default=1)
    value_schema = models.JSONField(null=True, blank=True)
    value = models.JSONField(null=True, blank=True)
    version = models.PositiveBigIntegerField(default=1)
    # Additive shards: a snapshot of the pycrdt Doc, and the version it (and
    # ``value``) stand at; the CrdtUpdate rows after it complete the shard.
    crdt_state = models.BinaryField(null=True, blank=True, editable=False)
    crdt_state_version = models.PositiveBigIntegerField(default=1)
    # The newest lease fence a write to this shard has carried (0: none yet).
    fence = models.PositiveBigIntegerField(default=0)
    created_by = models.CharField(max_length=128)
    updated_by = models.CharField(max_length=128)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # This row's identity: a deleted and re-created shard keeps its id but gets a
    # new incarnation, so state bound to the old one (a Yjs socket's rules, a
    # lease's binding, a cached Doc) can never write through to the new one.
    incarnation = models.UUIDField(default=uuid.uuid4, editable=False)

    objects = ShardQuerySet.as_manager()

    # The columns that grow with the shard: left out where only rules are needed.
    PAYLOAD = ("value", "crdt_state")

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.id} v{self.version}"

    @property
    def crdt_kind(self) -> str:
        """An additive shard's CRDT type (only decision shards have none)."""
        if self.crdt_type is None:
            raise ValueError(f"{self.id} is a decision shard: it has no CRDT type")
        return self.crdt_type


class CrdtUpdate(models.Model):
    """One applied additive operation: the Doc update it made and the JSON op."""

    shard = models.ForeignKey(Shard, on_delete=models.CASCADE, related_name="crdt_updates")
    version = models.PositiveBigIntegerField()
    update = models.BinaryField()
    op = models.JSONField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["shard", "version"], name="one_update_per_version")
        ]

    def __str__(self) -> str:
        return f"{self.shard_id} v{self.version}"


class DeliveryQuerySet(models.QuerySet):
    def older_than(self, when: datetime) -> DeliveryQuerySet:
        return self.filter(read_at__lt=when)


class Delivery(models.Model):
    """Which agent read which version of which shard, and when."""

    agent_id = models.CharField(max_length=128)
    shard_id = models.CharField(max_length=128)
    version = models.PositiveBigIntegerField()
    read_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "deliveries"
        indexes = [models.Index(fields=["shard_id", "agent_id"])]

    def __str__(self) -> str:
        return f"{self.agent_id} read {self.shard_id} v{self.version}"
