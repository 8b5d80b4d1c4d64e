from __future__ import annotations

import uuid
from datetime import datetime

from django.db import models
from django.utils import timezone

from .prefixes import prefix_q, scopes_q, within_prefixes

# 1-128 of [A-Za-z0-9_.:-], except "." and ".." (path segments: a URL with them
# names another resource). Three branches rather than a lookahead so OpenAPI
# tools that generate ids from the pattern can read it.
SHARD_ID_REGEX = (
    r"^(?:[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,127}"
    r"|\.[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,126}"
    r"|\.\.[A-Za-z0-9_.:-]{1,126})$"
)


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
        return self.defer("value", "crdt_state")

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

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.id} v{self.version}"


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


class AuditQuerySet(models.QuerySet):
    def history_of(self, shard: Shard) -> AuditQuerySet:
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
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_APPROVED = "approval.approved"
    APPROVAL_REJECTED = "approval.rejected"
    APPROVAL_EXPIRED = "approval.expired"
    APPROVAL_COMMITTED = "approval.committed"
    APPROVAL_COMMIT_FAILED = "approval.commit_failed"
    LEASE_GRANTED = "lease.granted"
    LEASE_ENDED = "lease.ended"
    LEASE_RELEASED_PATH = "lease.released_path"


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

    def __str__(self) -> str:
        return self.last_hash


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


class ApiKeyPermission(models.TextChoices):
    SHARD_READ = "shard:read"
    SHARD_WRITE = "shard:write"
    SHARD_CREATE = "shard:create"
    APPROVAL_REQUEST = "approval:request"
    APPROVAL_DECIDE = "approval:decide"
    APPROVAL_ALL = "approval:*"
    ADMIN = "admin"


class ApiKeyQuerySet(models.QuerySet):
    def usable(self) -> ApiKeyQuerySet:
        now = timezone.now()
        return self.filter(revoked=False).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class ApiKey(models.Model):
    """An agent credential. Only a SHA-256 of the secret is stored; the raw key
    (``zl_<prefix>.<secret>``) is shown once, at creation."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    hashed_key = models.CharField(max_length=64)
    permissions = models.JSONField(default=list)
    agent_ids = models.JSONField(default=list, blank=True)
    # Shard-id prefixes this key may touch; empty means every shard.
    shard_prefixes = models.JSONField(default=list, blank=True)
    # Requests per minute for this key; empty means the server default.
    rate_limit = models.PositiveIntegerField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"

    def has_permission(self, permission: str) -> bool:
        granted = set(self.permissions)
        if ApiKeyPermission.ADMIN in granted or permission in granted:
            return True
        return permission.startswith("approval:") and ApiKeyPermission.APPROVAL_ALL in granted

    def allows_agent(self, agent_id: str) -> bool:
        return not self.agent_ids or agent_id in self.agent_ids

    def allows_shard(self, shard_id: str) -> bool:
        return within_prefixes(shard_id, self.shard_prefixes)


class CommitSample(models.Model):
    """One commit attempt as the server saw it: the metrics' raw material."""

    OK, CONFLICT = "ok", "conflict"

    at = models.DateTimeField(db_index=True)
    shard_id = models.CharField(max_length=128)
    latency_ms = models.FloatField()
    outcome = models.CharField(max_length=8)

    def __str__(self) -> str:
        return f"{self.shard_id} {self.outcome} {self.latency_ms:.1f} ms"


class MetricCounter(models.Model):
    """A running total shared by every server process."""

    name = models.CharField(primary_key=True, max_length=64)
    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


class SocketGauge(models.Model):
    """One server process's open agent sockets, refreshed while it lives."""

    process = models.CharField(primary_key=True, max_length=128)
    connections = models.IntegerField(default=0)
    subscriptions = models.IntegerField(default=0)
    shard_subscribers = models.JSONField(default=dict)
    updated_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.process}: {self.connections} sockets"


def new_lease_id() -> str:
    import secrets

    return f"lse_{secrets.token_hex(12)}"


class LeaseQuerySet(models.QuerySet):
    def live(self) -> LeaseQuerySet:
        return self.filter(revoked=False, expires_at__gt=timezone.now())

    def due(self) -> LeaseQuerySet:
        """Not yet ended, but past their time."""
        return self.filter(revoked=False, expires_at__lte=timezone.now())


class Lease(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_lease_id)
    holder = models.CharField(max_length=128)
    key_prefix = models.CharField(max_length=16, blank=True)
    ttl_seconds = models.PositiveIntegerField()
    expires_at = models.DateTimeField(db_index=True)
    fence = models.PositiveBigIntegerField(default=0)
    revoked = models.BooleanField(default=False)

    objects = LeaseQuerySet.as_manager()

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

    def __str__(self) -> str:
        return f"{self.lease_id}: {self.shard_id} {self.path}"


class IdempotencyRecord(models.Model):
    """A write's stored response, replayed for a retry with the same key and body."""

    scope = models.CharField(max_length=64)  # the API key's prefix
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField(null=True)  # None while in progress
    body = models.BinaryField(null=True)
    content_type = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "key"], name="one_record_per_key")]

    def __str__(self) -> str:
        return f"{self.scope}/{self.key} -> {self.status}"
