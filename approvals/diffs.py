"""The approval's diff (RFC 6902): computed once, at request time, within caps on
size, depth and time, and stored on the approval (``diff``, ``diff_omitted``).

Reads reuse the stored patch while the shard has not moved since the request;
only the detail of a drifted approval computes one against the current value,
under the same caps, and caches it per shard version. Lists never compute.

On the wire: ``diff`` is the patch, or null when a cap was hit;
``diff_truncated`` is true then, and ``diff_omitted`` says which cap:
"too_large", "too_deep" or "too_slow"; ``diff_version`` is the shard version
the patch starts from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache

from common.boundeddiff import BoundedDiff, DiffLimits, bounded_diff, json_too_deep
from common.errors import Invalid
from shards.models import Shard

from .models import Approval
from .selectors import ShardNow

CACHE_SECONDS = 3600


@dataclass(frozen=True)
class ApprovalDiff:
    patch: list[dict[str, Any]] | None
    omitted: str
    version: int  # the shard version the patch starts from


def diff_limits() -> DiffLimits:
    return DiffLimits(
        max_bytes=settings.ZEROLOCK_APPROVAL_DIFF_MAX_BYTES,
        max_depth=settings.ZEROLOCK_APPROVAL_MAX_DEPTH,
        max_seconds=settings.ZEROLOCK_APPROVAL_DIFF_MAX_MS / 1000,
    )


def value_diff(old: Any, new: Any) -> BoundedDiff:
    return bounded_diff(old, new, diff_limits())


def proposed_value_check(value: Any, field: str = "proposed_value") -> None:
    """400 for a value nested deeper than the console and the diff can show;
    ``field`` names it (``edited_value`` for an approval with edits)."""
    limit = settings.ZEROLOCK_APPROVAL_MAX_DEPTH
    if json_too_deep(value, limit):
        raise Invalid(
            f"{field} is nested more than {limit} levels deep.",
            fields={field: [f"nested more than {limit} levels deep"]},
        )


def unmoved(approval: Approval, now: ShardNow) -> bool:
    """The shard still holds the value the stored patch starts from: the same
    version of the same incarnation (a re-created shard starts again at v1)."""
    return now.version == approval.version_at_request and now.created_at <= approval.created_at


def stored_diff(approval: Approval) -> ApprovalDiff:
    return ApprovalDiff(approval.diff, approval.diff_omitted, approval.version_at_request)


def approval_diff(approval: Approval, now: ShardNow | None) -> ApprovalDiff:
    """The patch against the shard's current value (GET /api/approvals/{id}, docs/api.md).
    Without a shard (deleted), the stored one."""
    if now is None or unmoved(approval, now):
        return stored_diff(approval)
    cached = cache.get(_cache_key(approval, now))
    if cached is not None:
        return ApprovalDiff(*cached)
    row = (
        Shard.objects.filter(pk=approval.shard_id).values("version", "created_at", "value").first()
    )
    if row is None:
        return stored_diff(approval)
    result = value_diff(row["value"], approval.proposed_value)
    fresh = (result.patch, result.omitted, row["version"])
    cache.set(
        _cache_key(approval, ShardNow(row["version"], row["created_at"])), fresh, CACHE_SECONDS
    )
    return ApprovalDiff(*fresh)


def _cache_key(approval: Approval, now: ShardNow) -> str:
    return f"approval-diff:{approval.id}:{now.created_at.timestamp()}:{now.version}"
