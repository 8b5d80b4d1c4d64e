"""Watch: every change after a revision, in revision order, then live ones.

The revision is the audit entry id (global, gap-free), so the audit log is the
change stream and a reconnecting watcher resumes exactly where it stopped.
This is the domain half (what a watch may see, and the changes read in
bounded batches); the transports (``GET /api/watch`` as server-sent events,
``{"type": "watch"}`` on /ws/agents/) live in ``realtime.watch``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast, Length

from access.auth import reads_check
from access.models import ApiKey
from audit.models import AuditAction, AuditEntry
from common.errors import ApiError, ErrorCode
from common.inputs import iso_time, revision_param
from common.prefixes import prefix_q

# Changes looked at per query: their revisions and sizes only, never their values.
WINDOW = 500
# Values read into memory at once for one watch. A watcher that does not read
# holds at most this (plus one value larger than it, sent alone): the window of
# 500 whole entries it used to hold took 100 stalled sockets from 1.0 to 1.9 GB.
BATCH_BYTES = 256 * 1024
CHANGE_ACTIONS = [
    AuditAction.SHARD_CREATE,
    AuditAction.SHARD_COMMIT,
    AuditAction.SHARD_DELETE,
    AuditAction.LEASE_RELEASED_PATH,
]


def change_data(entry: AuditEntry) -> dict[str, Any]:
    return {
        "revision": entry.pk,
        "shard_id": entry.shard_id,
        "action": entry.action,
        "version": entry.version_after,
        "value": entry.value,
        "agent_id": entry.agent_id,
        "at": iso_time(entry.created_at),
    }


def watch_check(*, prefix: str, since: int, key: ApiKey) -> None:
    """Refuses a watch that would miss changes or see shards outside the key's
    scope (the same check that ends it later: ``reads_check``)."""
    reads_check(key, shard_ids=[prefix])
    oldest = AuditEntry.objects.order_by("id").values_list("id", flat=True).first()
    if oldest is not None and since < oldest - 1:
        raise ApiError(
            ErrorCode.COMPACTED,
            f"History before revision {oldest} is no longer held; watch from {oldest - 1} or later.",
            oldest_revision=oldest,
        )


def change_window(*, prefix: str, since: int, limit: int = WINDOW) -> list[tuple[int, int]]:
    """The next changes after ``since``: (revision, size of the value as text)."""
    entries = AuditEntry.objects.filter(id__gt=since, action__in=CHANGE_ACTIONS)
    if prefix:
        entries = entries.filter(prefix_q("shard_id", prefix))
    rows = (
        entries.order_by("id")
        .annotate(size=Length(Cast("value", output_field=TextField())))
        .values_list("id", "size")[:limit]
    )
    return [(revision, size or 0) for revision, size in rows]


def byte_batches(
    window: list[tuple[int, int]], max_bytes: int = BATCH_BYTES
) -> Iterator[list[int]]:
    """The window's revisions in order, grouped so that a group's values add up
    to at most ``max_bytes`` (a larger value is a group of its own)."""
    group: list[int] = []
    size = 0
    for revision, value_size in window:
        if group and size + value_size > max_bytes:
            yield group
            group, size = [], 0
        group.append(revision)
        size += value_size
    if group:
        yield group


def changes_of(revisions: list[int]) -> list[dict[str, Any]]:
    """The changes with these revisions, in order (a compacted one is missing)."""
    return [change_data(e) for e in AuditEntry.objects.filter(id__in=revisions).order_by("id")]


def latest_revision() -> int:
    return AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0


def watch_start(*, key: ApiKey, prefix: str, since: int | None) -> int:
    """Checks a watch and says where it starts (``since`` None: from now on)."""
    if since is None:
        since = latest_revision()
    watch_check(prefix=prefix, since=since, key=key)
    return since


def parse_watch_params(query: dict[str, list[str]]) -> tuple[str, int | None]:
    prefix = query.get("prefix", [""])[0]
    raw_since = query.get("since", [""])[0]
    if raw_since == "":
        return prefix, None  # from now on
    return prefix, revision_param(raw_since, "since")
