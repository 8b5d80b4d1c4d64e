"""The mark a write leaves, inside its own transaction, for the request that
asked for it.

An ``Idempotency-Key`` is reserved before the view runs and its answer stored
after; a process killed in between used to leave nobody knowing whether the
write happened. So the request sets a mark here (coordination.idempotency), and
every write calls ``applied_mark`` just before its transaction commits (the
outermost ``audited_transaction``, and each write of a group commit batch in
its own savepoint). The mark is in the database exactly when the write is.

A mark may refuse (raise): a retry took the reservation over, and this copy
must not apply too; its transaction then rolls back like any refused write.

A transaction that is not the request's own write clears the mark around itself
(``applied_marking(None)``): a refusal's audit record (shards.rules), a sweep
run before a read (shards.services.shard_read), timed sweeps, write-behind
batches. Marking those would tell a retry "applied" for a write that never was."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Mark = Callable[[], None]

_mark: ContextVar[Mark | None] = ContextVar("zerolock_applied_mark", default=None)


def applied_mark_current() -> Mark | None:
    """This context's mark: group commit carries it to the thread that writes."""
    return _mark.get()


@contextmanager
def applied_marking(mark: Mark | None) -> Iterator[None]:
    """Writes made inside (in this context) carry ``mark``; None: they carry none."""
    token = _mark.set(mark)
    try:
        yield
    finally:
        _mark.reset(token)


def applied_mark() -> None:
    """Called by the one write door just before its transaction commits."""
    mark = _mark.get()
    if mark is not None:
        mark()
