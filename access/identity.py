"""Who is acting: the ``Actor`` a write is recorded as and the ``Principal`` an
authenticated request carries. Plain values, free of DRF (nothing here imports
``rest_framework``), so the domain (shards, coordination, approvals) can name
who acts without depending on the HTTP layer; ``access.auth`` authenticates and
builds them."""

from __future__ import annotations

from dataclasses import dataclass

from .models import ApiKey


def sees_values(key: ApiKey) -> bool:
    """The one rule for what answers other than reads may show: a shard's values
    (a 409's ``current_value``, an approval's ``value_at_request`` and diff, a
    ``conflict_notify``) only to a key with ``shard:read``. ``shard:write`` or
    ``approval:request`` alone must not be a way to read."""
    return key.has_permission("shard:read")


@dataclass(frozen=True)
class Actor:
    """Who a write is recorded as: the agent id, and the key that vouched for it.
    ``sees_values``: whether a refusal may show it the shard's values (a 409's
    ``current_value``, ``conflict_notify``): only a key that may read them."""

    agent_id: str
    key_prefix: str = ""
    sees_values: bool = True


@dataclass(frozen=True)
class Principal:
    """Who is acting: the key, and the agent id it acts as (may be empty on reads)."""

    key: ApiKey
    agent_id: str

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def actor(self) -> Actor:
        return Actor(
            agent_id=self.agent_id, key_prefix=self.key.prefix, sees_values=sees_values(self.key)
        )

    @property
    def reader(self) -> str:
        """Who a read is recorded as: the agent, or else the key."""
        return self.agent_id or f"key:{self.key.prefix}"
