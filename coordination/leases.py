"""Leases: TTL-bound holders with keep-alive and fencing tokens.

A ``put`` inside a transaction may carry ``lease_id``: what it wrote at that path
is removed, and audited, when the lease expires or is revoked (the Concord
holder pattern: a crashed leader's name disappears by itself). Each lease gets a
``fence``, a token that only grows; a commit or transaction carrying a fence
older than the newest one a shard has seen is refused (409 FENCED), so a holder
that woke up after losing its lease cannot overwrite its successor.

Expiry is checked at the start of every write (and read of leases), and Celery
beat sweeps as well: correctness never waits for the worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Min, Q
from django.utils import timezone

from access.identity import Actor
from audit.chain import AuditWriter
from audit.models import AuditAction
from common.errors import ApiError, ErrorCode, Invalid, LeaseNotFound
from common.inputs import is_json_integer, iso_time
from common.jsonpaths import path_delete
from shards.models import Shard, ShardType
from shards.rules import Exemption, WriteRules
from shards.writer import version_write, write_transaction
from shards.writetx import WriteTx

from .models import AgentSession, Lease, LeaseBinding, is_lease_id

MIN_TTL, MAX_TTL = 1, 24 * 3600


def lease_data(lease: Lease) -> dict[str, Any]:
    return {
        "lease_id": lease.id,
        "ttl_seconds": lease.ttl_seconds,
        "expires_at": iso_time(lease.expires_at),
        "fence": lease.fence,
        "holder": lease.holder,
        "session": lease.session,
    }


def lease_expiry(ttl_seconds: int, now: datetime) -> datetime:
    """When a lease granted or renewed at ``now`` ends: the one rule for grant,
    keep-alive and session renewal."""
    return now + timedelta(seconds=ttl_seconds)


def _ttl(ttl_seconds: Any) -> int:
    if not is_json_integer(ttl_seconds) or not (MIN_TTL <= ttl_seconds <= MAX_TTL):
        raise Invalid(
            f"ttl_seconds must be an integer from {MIN_TTL} to {MAX_TTL}.",
            fields={"ttl_seconds": ["out of range"]},
        )
    return ttl_seconds


def _session_bound(session: Any, *, holder: str, key_prefix: str) -> bool:
    """``session: true`` binds the lease to its holder's agent sockets, so the
    holder must have one open (sent over the socket, it has)."""
    if session is None or session is False:
        return False
    if session is not True:
        raise Invalid("session must be true or false.", fields={"session": ["Not a boolean."]})
    if not AgentSession.objects.live().filter(agent_id=holder, key_prefix=key_prefix).exists():
        raise ApiError(
            ErrorCode.NO_SESSION,
            f"A session lease lives while {holder!r} has an agent socket open with this key, "
            "and it has none: open /ws/agents/ and send the request over it.",
        )
    return True


def lease_grant(*, holder: str, key_prefix: str, ttl_seconds: Any, session: Any = None) -> Lease:
    ttl = _ttl(ttl_seconds)
    bound = _session_bound(session, holder=holder, key_prefix=key_prefix)
    with write_transaction() as tx:  # expired leases end first
        now = timezone.now()
        lease = Lease(
            holder=holder,
            key_prefix=key_prefix,
            ttl_seconds=ttl,
            expires_at=lease_expiry(ttl, now),
            session=bound,
        )
        entry = tx.audit.append(
            action=AuditAction.LEASE_GRANTED,
            agent_id=holder,
            key_prefix=key_prefix,
            details={"lease_id": lease.id, "ttl_seconds": ttl, "session": bound},
        )
        # The grant's global revision is the fence: it only ever grows.
        lease.fence = entry.pk
        lease.save(force_insert=True)
    return lease


def lease_live(lease_id: str) -> Lease:
    """The live lease ``lease_id`` (``Lease.objects.live``), or 404 LEASE_NOT_FOUND:
    the one answer to "is this lease live?" for keep-alive, revoke and binding.
    An id of another shape is no lease, and never reaches the database (a NUL in
    it made PostgreSQL fail the query: 500)."""
    if not isinstance(lease_id, str) or not is_lease_id(lease_id):
        raise LeaseNotFound(lease_id)
    lease = Lease.objects.live().filter(pk=lease_id).first()
    if lease is None:
        raise LeaseNotFound(lease_id)
    return lease


def _held(lease_id: str, holder: str, key_prefix: str) -> Lease:
    """The caller's own live lease. The claimed agent id is not enough: another
    key may claim the same agent name, so the lease's owning key must be the
    caller's too."""
    lease = lease_live(lease_id)
    lease_owner_check(lease, holder=holder, key_prefix=key_prefix)
    return lease


def lease_owner_check(lease: Lease, *, holder: str, key_prefix: str) -> None:
    """Only the holding agent, through the key that took the lease, may use it."""
    if lease.holder != holder or lease.key_prefix != key_prefix:
        raise ApiError(
            ErrorCode.PERMISSION_DENIED,
            f"Lease {lease.id} is held by another agent or key: only its holder may use it.",
        )


def lease_keepalive(*, lease_id: str, holder: str, key_prefix: str) -> Lease:
    with write_transaction():  # expired leases end first
        lease = _held(lease_id, holder, key_prefix)
        lease.expires_at = lease_expiry(lease.ttl_seconds, timezone.now())
        lease.save(update_fields=["expires_at"])
    return lease


def session_leases_renew(agents: Iterable[tuple[str, str]]) -> int:
    """The session leases of these (key prefix, agent id) pairs live ``ttl_seconds``
    from now: called for every open socket's agent each heartbeat, and for an agent
    whose socket just closed, so a session lease ends ``ttl_seconds`` after its
    holder's last socket is gone. Only live ones: an ended lease stays ended.
    Answers how many were renewed."""
    return sum(_session_leases_renewed(agents).values())


def _session_leases_renewed(agents: Iterable[tuple[str, str]]) -> dict[int, int]:
    """{ttl_seconds: leases renewed with it}: one UPDATE per distinct ttl."""
    pairs = set(agents)
    if not pairs:
        return {}
    held = Q()
    for key_prefix, agent_id in pairs:
        held |= Q(key_prefix=key_prefix, holder=agent_id)
    leases = Lease.objects.live().filter(held, session=True)
    now = timezone.now()
    return {
        ttl: leases.filter(ttl_seconds=ttl).update(expires_at=lease_expiry(ttl, now))
        for ttl in leases.values_list("ttl_seconds", flat=True).distinct()
    }


def session_leases_release(agents: Iterable[tuple[str, str]]) -> int:
    """An agent's socket closed: its session leases' grace starts now. Answers the
    longest grace started (seconds; 0 if it holds none), which is how long this
    process must go on sweeping so the end is written on time even if nobody
    writes or reads (``realtime.sweeper.sweep_for``)."""
    return max(_session_leases_renewed(agents), default=0)


def lease_revoke(*, lease_id: str, holder: str, key_prefix: str) -> None:
    with write_transaction() as tx:  # expired leases end first
        lease = _held(lease_id, holder, key_prefix)
        _end(tx, lease, "revoked")


def leases_expire_due(tx: WriteTx) -> int:
    """The one place leases end by time. Registered as a write sweep: it runs at
    the start of every write transaction, so no write is based on what an
    expired lease held."""
    due = list(Lease.objects.due())
    for lease in due:
        _end(tx, lease, "expired")
    next_expiry.forget()
    return len(due)


class NextExpiry:
    """When the soonest live lease ends, as this process knows it, so that every
    read and commit can ask "is a lease due?" without a query.

    Leases saved here (granted, kept alive, edited in the admin) are noted at
    once, by a post_save hook (coordination.apps). Ones granted by another process (the
    worker, a second server) are learnt by re-reading the soonest expiry from the
    database at most every REFRESH_SECONDS; since no lease lives shorter than
    MIN_TTL > REFRESH_SECONDS, a lease is always known here before it is due.
    A stale deadline only errs early (a keep-alive moved it later): the sweep
    then finds nothing, and the deadline is read afresh."""

    REFRESH_SECONDS = 0.25

    def __init__(self) -> None:
        self._deadline: float | None = None  # epoch seconds; None: no live lease
        self._read_at = float("-inf")  # monotonic
        self._lock = threading.Lock()

    def due(self) -> bool:
        if time.monotonic() - self._read_at >= self.REFRESH_SECONDS:
            self._reload()
        deadline = self._deadline
        return deadline is not None and deadline <= time.time()

    def _reload(self) -> None:
        read_at = time.monotonic()
        soonest = Lease.objects.unended().aggregate(at=Min("expires_at"))["at"]
        with self._lock:
            self._deadline = soonest.timestamp() if soonest is not None else None
            self._read_at = read_at

    def note(self, expires_at: datetime) -> None:
        """A lease granted in this process ends at ``expires_at``."""
        with self._lock:
            at = expires_at.timestamp()
            self._deadline = at if self._deadline is None else min(self._deadline, at)

    def forget(self) -> None:
        """Read the soonest expiry afresh at the next question (after a sweep)."""
        self._read_at = float("-inf")


assert NextExpiry.REFRESH_SECONDS < MIN_TTL  # the invariant the class relies on
next_expiry = NextExpiry()


def leases_due() -> bool:
    """Lock-free and, mostly, query-free: is any lease past its time? Every read
    and write asks this first."""
    return next_expiry.due()


def leases_expire_now() -> int:
    """Ends every lease past its time, in a write transaction of its own (beat)."""
    if not leases_due():
        return 0
    with write_transaction() as tx:
        return tx.sweep_counts.get(LEASE_SWEEP, 0)


LEASE_SWEEP = "leases"


LeaseEndHook = Callable[[WriteTx, Lease, str], None]
_lease_end_hooks: dict[str, LeaseEndHook] = {}


def lease_end_hook_register(name: str, hook: LeaseEndHook) -> None:
    """``hook(tx, lease, why)`` runs in the transaction that ends a lease, before
    its paths are released: what else ends with it (reservations)."""
    _lease_end_hooks[name] = hook


def _end(tx: WriteTx, lease: Lease, why: str) -> None:
    """Ends a lease and removes what it held, one new version per shard touched
    (exempt, by name, from the owners, the gate and the schema: ``Exemption.LEASE_END``)."""
    lease.revoked = True
    lease.save(update_fields=["revoked"])
    tx.audit.append(
        action=AuditAction.LEASE_ENDED,
        agent_id=lease.holder,
        key_prefix=lease.key_prefix,
        details={"lease_id": lease.id, "why": why},
    )
    for hook in list(_lease_end_hooks.values()):
        hook(tx, lease, why)
    bindings = list(LeaseBinding.objects.filter(lease=lease))
    by_shard: dict[tuple[str, Any], list[list[Any]]] = {}
    for binding in bindings:
        by_shard.setdefault((binding.shard_id, binding.incarnation), []).append(binding.path)
    LeaseBinding.objects.filter(lease=lease).delete()
    for (shard_id, incarnation), paths in sorted(by_shard.items(), key=lambda kv: kv[0][0]):
        # Only the incarnation the paths were written in: a shard deleted and
        # re-created since is another shard, with its own rules (fail closed).
        shard = Shard.objects.filter(
            pk=shard_id, incarnation=incarnation, type=ShardType.DECISION
        ).first()
        if shard is None:
            continue
        value = shard.value
        removed = [p for p in paths if path_delete(value, tuple(p))]
        if not removed:
            continue
        version_write(
            tx=tx,
            shard=shard,
            actor=Actor(agent_id=lease.holder),
            expected_version=shard.version,
            value=value,
            rules=WriteRules(
                exemption=Exemption.LEASE_END,
                details={"lease_id": lease.id, "paths": removed, "why": why},
            ),
            action=AuditAction.LEASE_RELEASED_PATH,
            committed_by=f"lease:{lease.id}",
        )


def lease_bind(
    *, lease_id: str, holder: str, key_prefix: str, shard: Shard, path: list[Any]
) -> None:
    """Inside a transaction's write: ``path`` of this incarnation of ``shard``
    belongs to this lease, which must be the caller's (agent and key)."""
    lease = _held(lease_id, holder, key_prefix)
    LeaseBinding.objects.get_or_create(
        lease=lease, shard_id=shard.id, incarnation=shard.incarnation, path=path
    )


def lease_bindings_drop(audit: AuditWriter, shard_id: str) -> None:
    """A shard is being deleted (a registered delete hook): the leases bound to
    it let go of it, writing nothing (the lease itself lives on for whatever
    else it holds)."""
    LeaseBinding.objects.filter(shard_id=shard_id).delete()
