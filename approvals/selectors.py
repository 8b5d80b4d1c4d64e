"""Reads of approvals, for the console, the API and the dashboard.

An approval is read beside its shard as it is now (``ShardNow``: the version and
the incarnation, not the value), and whether it is stale is one rule,
``approval_stale``, which every page, list and answer asks through
``ApprovalNow.stale``.

Lists of approvals are keyset-paged, newest first: a cursor names the last
approval a page held (``cursor_of``), and the next page starts after it
(``ApprovalQuerySet.older_than``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from common.errors import ApiError, ErrorCode
from common.pages import FETCH_CHUNK
from shards.models import Shard

from .models import (
    SHARD_CREATED_NOW,
    SHARD_VERSION_NOW,
    Approval,
    ApprovalDecision,
    ApprovalQuerySet,
    ApprovalStatus,
    decisions_named,
)


@dataclass(frozen=True)
class ShardNow:
    """What a read needs to know about the shard without loading its value."""

    version: int
    created_at: datetime


def shard_now(shard_id: str) -> ShardNow | None:
    row = Shard.objects.filter(pk=shard_id).values("version", "created_at").first()
    return ShardNow(**row) if row else None


def at_request(approval: Approval) -> ShardNow:
    """The shard as the request read it."""
    return ShardNow(approval.version_at_request, approval.created_at)


def approval_stale(approval: Approval, shard: ShardNow | None) -> bool:
    """Approving would not apply: the shard is no longer at the version the
    request names, or it is gone. The one rule behind the queue's badge and its
    "stale only" filter, the detail page's warning, the console's check before
    an approve, the API's ``stale`` and the dashboard's badge."""
    return shard is None or shard.version != approval.expected_version


@dataclass(frozen=True)
class ApprovalNow:
    """An approval beside its shard as it is now."""

    approval: Approval
    shard: ShardNow | None  # None: the shard is gone

    @classmethod
    def of(cls, approval: Approval) -> ApprovalNow:
        """From an approval read ``with_shard_now()``."""
        # Annotations: attributes the model's type does not declare.
        version: int | None = getattr(approval, SHARD_VERSION_NOW)
        created_at: datetime | None = getattr(approval, SHARD_CREATED_NOW)
        if version is None or created_at is None:
            return cls(approval, None)
        return cls(approval, ShardNow(version, created_at))

    @property
    def current_version(self) -> int | None:
        return self.shard.version if self.shard else None

    @property
    def stale(self) -> bool:
        return approval_stale(self.approval, self.shard)


def approval_get(approval_id: str) -> Approval:
    """The approval, or 404 APPROVAL_NOT_FOUND."""
    approval = Approval.objects.filter(pk=approval_id).first()
    if approval is None:
        raise ApiError(
            ErrorCode.APPROVAL_NOT_FOUND, f"No approval {approval_id!r}.", approval_id=approval_id
        )
    return approval


def approval_pending(approval_id: str) -> bool:
    """Whether the approval still waits for a decision (``pending`` and not past
    its expiry); an unknown id is not pending."""
    return Approval.objects.pending().filter(pk=approval_id).exists()


def approval_now(approval: Approval) -> ApprovalNow:
    return ApprovalNow(approval, shard_now(approval.shard_id))


def approvals_now(approvals: ApprovalQuerySet, *, limit: int | None = None) -> list[ApprovalNow]:
    """``approvals`` in their order (at most ``limit``), each beside its shard:
    one statement, however many shards."""
    rows = approvals.with_shard_now()
    return [ApprovalNow.of(a) for a in (rows[:limit] if limit is not None else rows)]


def pending_on_shard(shard_id: str, user: Any) -> list[ApprovalNow]:
    """What waits for a decision on one shard that ``user`` may see, newest first."""
    return approvals_now(
        Approval.objects.visible_to(user).pending().filter(shard_id=shard_id).newest_first()
    )


def next_pending(approval_id: str, user: Any) -> str | None:
    """The request to go to after deciding this one: the next to expire of
    those ``user`` may see."""
    return (
        Approval.objects.visible_to(user)
        .pending()
        .exclude(pk=approval_id)
        .expiring_first()
        .values_list("id", flat=True)
        .first()
    )


def approvals_listed(
    *, status: str = "", shard_id: str = "", requested_by: str = "", scopes: list[str]
) -> ApprovalQuerySet:
    """GET /api/approvals before paging: filtered, inside the key's scopes, in
    keyset order."""
    return (
        Approval.objects.matching(status=status, shard_id=shard_id, requested_by=requested_by)
        .within_scopes(scopes)
        .newest_first()
    )


@dataclass(frozen=True)
class Listed:
    read: ApprovalNow
    decisions: list[ApprovalDecision]


def listed(approvals: ApprovalQuerySet, *, start: int, count: int) -> tuple[int, Iterator[Listed]]:
    """Up to ``count`` of ``approvals`` from ``start``: how many there were, and
    the approvals themselves, each beside its shard now and its decisions.

    The rows come FETCH_CHUNK at a time (an approval holds up to three values of
    up to a megabyte); the decisions, which are small, for the whole page in one
    query, not one per chunk. So a page is four statements however long."""
    ids = list(approvals.values_list("id", flat=True)[start : start + count])
    decisions: dict[str, list[ApprovalDecision]] = {approval_id: [] for approval_id in ids}
    for decision in decisions_named().filter(approval_id__in=ids):
        decisions[decision.approval_id].append(decision)
    # By id alone: a row the filters no longer match (decided meanwhile) is still
    # this page's, as the ids query found it.
    rows = (
        Approval.objects.filter(pk__in=ids)
        .select_related("approver_group", "escalation_group")
        .newest_first()
        .with_shard_now()
    )
    return len(ids), (
        Listed(ApprovalNow.of(approval), decisions[approval.id])
        for approval in rows.iterator(chunk_size=FETCH_CHUNK)
    )


def approvers_of(approval: Approval) -> list[str]:
    """Who approved it (decisions that count), by the names people know them by.
    Read from ``approval.decisions``: prefetch them (``with_decisions``) for many."""
    return [
        d.principal_name or d.decider.split(":", 1)[-1]
        for d in approval.decisions.all()
        if d.approve and d.counts
    ]


@dataclass(frozen=True)
class ApprovedCommit:
    approval_id: str
    approvers: list[str]


def approvals_of_commits(
    shard_id: str, audit_entry_ids: list[int], user: Any
) -> dict[int, ApprovedCommit]:
    """For a shard's history: which of these commits (by audit entry) an approval
    that ``user`` may see made, and who approved it. One statement for the
    approvals, one for their decisions, whatever the page's length."""
    approvals = (
        Approval.objects.visible_to(user)
        .filter(
            shard_id=shard_id,
            status=ApprovalStatus.COMMITTED,
            commit__audit_entry_id__in=audit_entry_ids,
        )
        .only("id", "commit")
        .with_decisions()
    )
    return {
        approval.commit["audit_entry_id"]: ApprovedCommit(approval.id, approvers_of(approval))
        for approval in approvals
    }


def approval_counts() -> dict[str, int]:
    """How many approvals are in each (effective) status: GET /api/metrics and
    the metrics page show it."""
    return {
        status: Approval.objects.with_status(status).count() for status in ApprovalStatus.values
    }


# --- cursors ------------------------------------------------------------------
# "<microseconds since 1970 UTC>.<approval id>": the (created_at, id) of the
# last approval a page held. Clients treat it as opaque; it is readable only so
# that a log or a bug report says where a walk was.

CURSOR_REGEX = r"^[0-9]{1,18}\.[A-Za-z0-9_]{1,40}$"
_CURSOR = re.compile(CURSOR_REGEX.removeprefix("^").removesuffix("$"))
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_LAST = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND


def cursor_of(created_at: datetime, approval_id: str) -> str:
    return f"{(created_at - _EPOCH) // _MICROSECOND}.{approval_id}"


def is_cursor(text: str) -> bool:
    return _CURSOR.fullmatch(text) is not None


def cursor_parse(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor names. 18 digits reach past the year 9999:
    such a cursor is the end of time, after which everything is older, not an
    error (any cursor the pattern allows is taken)."""
    micros, approval_id = cursor.split(".", 1)
    return _EPOCH + min(int(micros), _LAST) * _MICROSECOND, approval_id
