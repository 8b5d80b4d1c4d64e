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

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import connection, transaction
from django.utils import timezone

from access.auth import Actor
from audit.chain import AuditWriter, audited_transaction
from audit.models import AuditAction
from audit.rejections import rejection_entry
from common import hotsql
from common.errors import ApiError
from common.events import send_event_on_commit
from metrics.models import CommitSample
from metrics.record import recorder

from . import crdt_store
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
def swept_transaction(started: float) -> Iterator[AuditWriter]:
    """The one way a version-writing transaction opens: the write sweeps (lease
    expiry) run first, under the same lock, and the Docs its additive writes
    leave are cached once it commits. Shared by write_transaction and group
    commit's batches."""
    # Which sweeps have work, asked before the lock (an in-process deadline for
    # leases): a write does not pay for the sweep under the lock when nothing is due.
    due = {name for name, check in list(hooks.write_sweeps_due.items()) if check()}
    with audited_transaction() as audit:
        audit.swept, audit.started = True, started
        write_sweeps_run(audit, due)
        yield audit
        fresh_docs_kept(audit)


@contextmanager
def write_transaction() -> Iterator[AuditWriter]:
    """The audited transaction every version write runs in (swept_transaction)."""
    started = time.perf_counter()
    with swept_transaction(started) as audit:
        yield audit
    # Reached only when the transaction committed: count what it wrote.
    latency_ms = (time.perf_counter() - started) * 1000
    for shard_id in audit.written:
        recorder.commit(shard_id=shard_id, latency_ms=latency_ms, outcome=CommitSample.OK)


T = TypeVar("T")


@dataclass
class _Queued:
    work: Callable[[AuditWriter], Any]
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    written: list[str] = field(default_factory=list)


class GroupCommit:
    """Group commit: concurrent writes of one process share one transaction.

    A writer queues its work and takes the leader's lock. Whoever holds it takes
    everything queued (at most ``max_batch``), runs each write in a savepoint of
    one write transaction, in queue order, and commits once; every writer in the
    batch is released when that commit is durable. Each write keeps its own OCC
    check, version and audit entry (the chain runs through the batch in order),
    and its own answer: one that raises is rolled back to its savepoint alone,
    and a refusal it returns (a 409 with its audit entry) stands beside the
    others' commits. If the commit itself fails, every write in the batch gets
    that error: nothing in it was acknowledged.

    Under load the batch fills while the previous one is being written, so the
    transaction overhead (BEGIN, the audit head, COMMIT and its WAL flush or
    fsync) is paid once per batch rather than once per write."""

    def __init__(self, max_batch: int = 64) -> None:
        self.max_batch = max_batch
        self._leader = threading.Lock()
        self._queue: deque[_Queued] = deque()
        self.batches = 0  # transactions committed (tests count them)

    def run(self, work: Callable[[AuditWriter], T]) -> T:
        """``work(audit)`` inside a write transaction, with others' writes."""
        if connection.in_atomic_block:
            # Inside the caller's own transaction: another thread's connection
            # could neither see nor join it. Run here, nested, as before.
            with write_transaction() as audit:
                return work(audit)
        queued = _Queued(work, time.perf_counter())
        self._queue.append(queued)
        while not queued.done.is_set():
            with self._leader:
                if queued.done.is_set():
                    break
                batch: list[_Queued] = []
                while self._queue and len(batch) < self.max_batch:
                    batch.append(self._queue.popleft())
                if batch:
                    self._apply(batch)
        if queued.error is not None:
            raise queued.error
        return queued.result

    def _apply(self, batch: list[_Queued]) -> None:
        try:
            with swept_transaction(batch[0].started) as audit:
                for queued in batch:
                    head_hash, written_from = audit.head.last_hash, len(audit.written)
                    try:
                        with transaction.atomic():  # a savepoint: this write alone
                            queued.result = queued.work(audit)
                    except Exception as error:  # noqa: BLE001 -- handed to its own caller
                        audit.head.last_hash = head_hash  # its entries were rolled back
                        del audit.written[written_from:]
                        audit.fresh_docs.clear()  # it may have changed a Doc in place
                        queued.error = error
                        refusal = getattr(error, "audit_entry", None)
                        if refusal is not None:  # e.g. FENCED: audited with the batch
                            audit.append(**refusal)
                    else:
                        queued.written = audit.written[written_from:]
            self.batches += 1
        except BaseException as error:
            for queued in batch:
                if queued.error is None:
                    queued.result, queued.error = None, error
            raise_if_not_exception(error)
        else:
            now = time.perf_counter()
            for queued in batch:
                for shard_id in queued.written:
                    recorder.commit(
                        shard_id=shard_id,
                        latency_ms=(now - queued.started) * 1000,
                        outcome=CommitSample.OK,
                    )
        finally:
            for queued in batch:
                queued.done.set()


def raise_if_not_exception(error: BaseException) -> None:
    """A failed batch is its writers' error; only a KeyboardInterrupt or
    SystemExit also stops the leader's own thread."""
    if not isinstance(error, Exception):
        raise error


group_commit = GroupCommit()


def fresh_docs_kept(audit: AuditWriter) -> None:
    """The Docs this transaction's additive writes left are cached in this
    process once it commits (on the outermost commit: a nested transaction
    rolled back later must not leave a Doc the database never had)."""
    docs = dict(audit.fresh_docs)

    def keep() -> None:
        for shard_id, loaded in docs.items():
            crdt_store.remember(shard_id, loaded)

    if docs:
        transaction.on_commit(keep)


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
    try:
        fence_check(shard_ids={shard.id}, fence=fence)
    except ApiError as refusal:
        refusal.audit_entry = rejection_entry(
            agent_id=actor.agent_id,
            key_prefix=actor.key_prefix,
            shard_id=shard.id,
            expected=expected_version,
            code=refusal.code,
        )
        raise
    by = committed_by or actor.agent_id
    version = expected_version + 1
    stored = {"value": value} if columns is None else columns
    touched = hotsql.update_where(
        Shard,
        {"updated_by": by, "updated_at": timezone.now(), **stored},
        bump="version",
        id=shard.id,
        version=expected_version,
        incarnation=shard.incarnation,
    )
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
