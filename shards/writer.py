"""The one place a shard gets a new version.

Every path that changes a shard comes through ``version_write``, inside a
``write_transaction``: the REST commit, a transaction's put/delete/append, an
additive operation, a Yjs update, a lease's end, an approved commit. So each
of them, without exception:

- runs the registered write sweeps first (lease expiry), in the same
  transaction, before anything is read for the write;
- checks the fence it carries (``fence_check``);
- applies the change as one conditional UPDATE against the version and the
  incarnation whose rules were checked (zero rows: someone else got there);
- appends exactly one audit entry for the new version;
- counts the commit in the metrics;
- sends ``shard_changed`` (the subscribers' ``invalidate``) after commit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db.models import F
from django.utils import timezone

from access.auth import Actor
from audit.chain import AuditWriter, audited_transaction
from audit.models import AuditAction
from common.errors import ApiError
from common.events import send_event_on_commit
from metrics.models import CommitSample
from metrics.record import recorder

from .hooks import hooks
from .models import Shard

_SAME = object()


@dataclass(frozen=True)
class CommitResult:
    version: int
    value: Any
    audit_entry_id: int

    def as_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies the value, which can be large.
        return {"version": self.version, "value": self.value, "audit_entry_id": self.audit_entry_id}


@contextmanager
def write_transaction() -> Iterator[AuditWriter]:
    """The audited transaction every version write runs in: the write sweeps
    (lease expiry) run first, under the same lock."""
    started = time.perf_counter()
    # Which sweeps have work, asked before the lock (one cheap indexed query
    # each): a write does not pay for the sweep under the lock when nothing is due.
    due = {name for name, check in list(hooks.write_sweeps_due.items()) if check()}
    with audited_transaction() as audit:
        audit.swept, audit.started = True, started
        write_sweeps_run(audit, due)
        yield audit
    # Reached only when the transaction committed: count what it wrote.
    latency_ms = (time.perf_counter() - started) * 1000
    for shard_id in audit.written:
        recorder.commit(shard_id=shard_id, latency_ms=latency_ms, outcome=CommitSample.OK)


def write_sweeps_run(audit: AuditWriter, due: set[str]) -> None:
    """The write sweeps that have work, inside the caller's write transaction."""
    for name, sweep in list(hooks.write_sweeps.items()):
        audit.sweep_counts[name] = sweep(audit) if name in due else 0


def fence_check(*, shard_ids: set[str], fence: int | None) -> None:
    """The fencing rule: a write carrying an older fence than the newest one the
    shard has seen is refused; a newer one becomes the shard's fence."""
    if fence is None:
        return
    for shard_id in sorted(shard_ids):
        seen = Shard.objects.filter(pk=shard_id).values_list("fence", flat=True).first()
        if seen is not None and fence < seen:
            raise ApiError(
                409,
                "FENCED",
                f"Fence {fence} is older than {seen}, the newest holder's on {shard_id!r}.",
                shard_id=shard_id,
                fence=fence,
                current_fence=seen,
            )
    Shard.objects.filter(pk__in=shard_ids, fence__lt=fence).update(fence=fence)


def version_write(
    *,
    audit: AuditWriter,
    shard: Shard,
    actor: Actor,
    expected_version: int,
    value: Any,
    columns: dict[str, Any] | None = None,
    fence: int | None = None,
    action: str = AuditAction.SHARD_COMMIT,
    audit_value: Any = _SAME,
    details: dict[str, Any] | None = None,
    committed_by: str = "",
) -> CommitResult | None:
    """Writes version ``expected_version + 1`` of ``shard`` (its rules already
    checked by the caller). None when the version or the incarnation has moved.

    ``columns``: what the row stores besides the version (default: ``value``;
    an additive shard stores its Doc and value only at compaction).
    ``audit_value``: what the audit entry records (default: ``value``; an
    additive operation records the op). ``committed_by``: who the row and the
    push name, when not the actor (a lease's end)."""
    if not getattr(audit, "swept", False):
        raise RuntimeError("version_write runs inside write_transaction()")
    fence_check(shard_ids={shard.id}, fence=fence)
    by = committed_by or actor.agent_id
    version = expected_version + 1
    stored = {"value": value} if columns is None else columns
    touched = Shard.objects.filter(
        pk=shard.id, version=expected_version, incarnation=shard.incarnation
    ).update(version=F("version") + 1, updated_by=by, updated_at=timezone.now(), **stored)
    if not touched:
        return None
    entry = audit.append(
        action=action,
        agent_id=actor.agent_id,
        key_prefix=actor.key_prefix,
        shard_id=shard.id,
        version_before=expected_version,
        version_after=version,
        value=value if audit_value is _SAME else audit_value,
        details=details,
    )
    audit.written.append(shard.id)  # counted in the metrics once committed
    send_event_on_commit("shard_changed", shard_id=shard.id, version=version, committed_by=by)
    return CommitResult(version, value, entry.pk)


def conflict_record(*, shard_id: str, started: float) -> None:
    """A commit refused because its version had moved on: counted once, wherever
    it was decided (before the lock, or under it)."""
    recorder.commit(
        shard_id=shard_id,
        latency_ms=(time.perf_counter() - started) * 1000,
        outcome=CommitSample.CONFLICT,
    )
