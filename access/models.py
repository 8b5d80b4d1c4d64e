from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from common.prefixes import within_prefixes


class ApiKeyPermission(models.TextChoices):
    SHARD_READ = "shard:read"
    SHARD_WRITE = "shard:write"
    SHARD_CREATE = "shard:create"
    APPROVAL_REQUEST = "approval:request"
    APPROVAL_DECIDE = "approval:decide"
    APPROVAL_ALL = "approval:*"
    # Standing approval policies decide requests unattended: granted by name or by
    # admin only, never by approval:*, which keys held before policies existed.
    APPROVAL_POLICY = "approval:policy"
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
    # The person the key belongs to, if any: its approval decisions then count as
    # that person's, the same principal as their console login, so one person
    # holding a login and keys meets a quorum once (approvals.services.Decider).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="api_keys",
        help_text="The person this key belongs to: its approvals count as theirs.",
    )
    revoked = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        db_table = "shards_apikey"
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"

    def has_permission(self, permission: str) -> bool:
        granted = set(self.permissions)
        if ApiKeyPermission.ADMIN in granted or permission in granted:
            return True
        return (
            permission.startswith("approval:")
            and permission != ApiKeyPermission.APPROVAL_POLICY
            and ApiKeyPermission.APPROVAL_ALL in granted
        )

    def allows_agent(self, agent_id: str) -> bool:
        return not self.agent_ids or agent_id in self.agent_ids

    def allows_shard(self, shard_id: str) -> bool:
        return within_prefixes(shard_id, self.shard_prefixes)
