"""The one place a shard gets a new version.

Every path that changes a shard comes through ``version_write``, inside a
``write_transaction`` (or a group commit batch): the REST commit, a
transaction's put/delete/append, an additive operation, a Yjs update, a
claim, a lease's end, an approved commit. So each of them, without exception:

- runs the registered write sweeps first (lease expiry), in the same
  transaction, before anything is read for the write;
- applies the write's rules (``rules.rules_locked``: owners, the gate, the
  schema, the read set, the fence), less the exemptions the write names;
- applies the change as one conditional UPDATE against the version and the
  incarnation whose rules were checked (zero rows: someone else got there);
- appends exactly one audit entry for the new version (and the approval's
  "committed" entry when it carries one, spending it);
- counts the commit in the metrics once the transaction commits;
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

from access.identity import Actor
from audit.chain import audited_transaction
from audit.models import AuditAction
from audit.rejections import rejection_entry
from common import hotsql
from common.applied import Mark, applied_mark_current, applied_marking
from common.errors import ApiError, ShardNotFound
from common.events import send_event_on_commit
from metrics.models import CommitSample
from metrics.record import recorder

from . import crdt_store
from .hooks import hooks
from .models import Shard
from .rules import Refusal, WriteRules, conflict_told, rules_locked, stale_error
from .writetx import WriteTx

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
def swept_transaction(started: float) -> Iterator[WriteTx]:
    """The one way a version-writing transaction opens: the write sweeps (lease
    expiry) run first, under the same lock, and the Docs its additive writes
    leave are cached once it commits. Shared by write_transaction and group
    commit's batches."""
    # Which sweeps have work, asked before the lock (an in-process deadline for
    # leases): a write does not pay for the sweep under the lock when nothing is due.
    due = {name for name, check in list(hooks.write_sweeps_due.items()) if check()}
    with audited_transaction() as audit:
        tx = WriteTx(audit=audit, started=started, swept=True)
        write_sweeps_run(tx, due)
        yield tx
        fresh_docs_kept(tx)


@contextmanager
def write_transaction() -> Iterator[WriteTx]:
    """The audited transaction every version write runs in (swept_transaction)."""
    started = time.perf_counter()
    with swept_transaction(started) as tx:
        yield tx
    # Reached only when the transaction committed: count what it wrote.
    commits_count(tx.written, started)


def commits_count(written: list[str], started: float) -> None:
    """The one place commits are counted in the metrics: once their transaction
    has committed, with the latency from when the writer asked."""
    latency_ms = (time.perf_counter() - started) * 1000
    for shard_id in written:
        recorder.commit(shard_id=shard_id, latency_ms=latency_ms, outcome=CommitSample.OK)


T = TypeVar("T")


@dataclass
class _Queued:
    work: Callable[[WriteTx], Any]
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    written: list[str] = field(default_factory=list)
    # The writer's Idempotency-Key mark, carried to the leader's thread.
    mark: Mark | None = field(default_factory=applied_mark_current)


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

    def run(self, work: Callable[[WriteTx], T]) -> T:
        """``work(tx)`` inside a write transaction, with others' writes."""
        if connection.in_atomic_block:
            # Inside the caller's own transaction: another thread's connection
            # could neither see nor join it. Run here, nested, as before.
            with write_transaction() as tx:
                return work(tx)
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
        # The batch's own transaction carries no mark (the leader's would be set
        # even when its write fails); each write sets its own, in its savepoint.
        with applied_marking(None):
            self._apply_batch(batch)

    def _apply_batch(self, batch: list[_Queued]) -> None:
        try:
            with swept_transaction(batch[0].started) as tx:
                for queued in batch:
                    head_hash, written_from = tx.audit.head.last_hash, len(tx.written)
                    try:
                        with transaction.atomic():  # a savepoint: this write alone
                            queued.result = queued.work(tx)
                            if queued.mark is not None:
                                queued.mark()
                    except Exception as error:  # noqa: BLE001 -- handed to its own caller
                        tx.audit.head.last_hash = head_hash  # its entries were rolled back
                        del tx.written[written_from:]
                        tx.fresh_docs.clear()  # it may have changed a Doc in place
                        queued.error = error
                        if isinstance(error, Refusal):  # e.g. FENCED: audited with the batch
                            tx.audit.append(**error.record)
                    else:
                        queued.written = tx.written[written_from:]
            self.batches += 1
        except BaseException as error:
            for queued in batch:
                if queued.error is None:
                    queued.result, queued.error = None, error
            raise_if_not_exception(error)
        else:
            for queued in batch:
                commits_count(queued.written, queued.started)
        finally:
            for queued in batch:
                queued.done.set()


def raise_if_not_exception(error: BaseException) -> None:
    """A failed batch is its writers' error; only a KeyboardInterrupt or
    SystemExit also stops the leader's own thread."""
    if not isinstance(error, Exception):
        raise error


group_commit = GroupCommit()


def fresh_docs_kept(tx: WriteTx) -> None:
    """The Docs this transaction's additive writes left are cached in this
    process once it commits (on the outermost commit: a nested transaction
    rolled back later must not leave a Doc the database never had)."""
    docs = dict(tx.fresh_docs)

    def keep() -> None:
        for shard_id, loaded in docs.items():
            crdt_store.remember(shard_id, loaded)

    if docs:
        transaction.on_commit(keep)


def write_sweeps_run(tx: WriteTx, due: set[str]) -> None:
    """The write sweeps that have work, inside the caller's write transaction."""
    for name, sweep in list(hooks.write_sweeps.items()):
        tx.sweep_counts[name] = sweep(tx) if name in due else 0


def version_write(
    *,
    tx: WriteTx,
    shard: Shard,
    actor: Actor,
    expected_version: int,
    value: Any,
    rules: WriteRules,
    columns: dict[str, Any] | None = None,
    action: str = AuditAction.SHARD_COMMIT,
    audit_value: Any = _SAME,
    committed_by: str = "",
) -> CommitResult | None:
    """Writes version ``expected_version + 1`` of ``shard`` once its rules hold
    (``rules_locked``; a refusal raises, with its audit record). None when the
    version or the incarnation has moved.

    ``columns``: what the row stores besides the version (default: ``value``;
    an additive shard stores its Doc and value only at compaction).
    ``audit_value``: what the audit entry records (default: ``value``; an
    additive operation records the op). ``committed_by``: who the row and the
    push name, when not the actor (a lease's end)."""
    if not tx.swept:
        raise RuntimeError("version_write runs inside write_transaction()")
    rules_locked(shard, actor, rules, expected_version=expected_version, value=value)
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
    details = dict(rules.details)
    if rules.approval_id:
        details["approval_id"] = rules.approval_id
    entry = tx.audit.append(
        action=action,
        agent_id=actor.agent_id,
        key_prefix=actor.key_prefix,
        shard_id=shard.id,
        version_before=expected_version,
        version_after=version,
        value=value if audit_value is _SAME else audit_value,
        details=details or None,
    )
    result = CommitResult(version, value, entry.pk)
    if rules.approval_id:
        approval_spent(tx, actor, shard.id, rules, result)
    tx.written.append(shard.id)  # counted in the metrics once committed
    send_event_on_commit("shard_changed", shard_id=shard.id, version=version, committed_by=by)
    return result


def occ_write(
    tx: WriteTx,
    *,
    actor: Actor,
    shard: Shard,
    expected_version: int,
    value: Any,
    rules: WriteRules,
) -> CommitResult | ApiError:
    """A decision shard's commit under the lock: the version written, or the
    refusal if the version (or the shard) has moved. The refusal is returned,
    not raised: its audit entry, and the loser's conflict_notify, commit with
    the batch."""
    result = version_write(
        tx=tx, shard=shard, actor=actor, expected_version=expected_version, value=value, rules=rules
    )
    if result is not None:
        return result
    current = (
        Shard.objects.filter(pk=shard.id, incarnation=shard.incarnation)
        .values("version", "value")
        .first()
    )
    rejection: ApiError
    if current is None:
        rejection = ShardNotFound(shard.id)
    else:
        rejection = stale_error(actor, expected_version, current)
        conflict_told(actor, shard.id, current, value)
    tx.audit.append(
        **rejection_entry(
            agent_id=actor.agent_id,
            key_prefix=actor.key_prefix,
            shard_id=shard.id,
            expected=expected_version,
            code=rejection.code,
        )
    )
    return rejection


def approval_spent(
    tx: WriteTx, actor: Actor, shard_id: str, rules: WriteRules, result: CommitResult
) -> None:
    """The one record of an approval's commit, in the commit's transaction; a
    commit that carried it through the gate also spends it there (single use)."""
    commit = {"version": result.version, "audit_entry_id": result.audit_entry_id}
    if rules.applies("gate"):
        assert hooks.gate is not None  # the gate rule refused the commit otherwise
        hooks.gate.consume(approval_id=str(rules.approval_id), commit=commit)
    tx.audit.append(
        action=AuditAction.APPROVAL_COMMITTED,
        agent_id=actor.agent_id,
        key_prefix=actor.key_prefix,
        shard_id=shard_id,
        details={"approval_id": rules.approval_id, **commit},
    )


def conflict_record(*, shard_id: str, started: float) -> None:
    """A commit refused because its version had moved on: counted once, wherever
    it was decided (before the lock, or under it)."""
    recorder.commit(
        shard_id=shard_id,
        latency_ms=(time.perf_counter() - started) * 1000,
        outcome=CommitSample.CONFLICT,
    )
