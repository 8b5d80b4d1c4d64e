"""Path reservations: an agent says which files it is working on, as globs.

``src/**/*.py`` reserved exclusively by one agent refuses every other agent's
reservation of a pattern that some path matches too (``src/app/*.py``), with
409 RESERVATION_CONFLICT naming the holders; shared reservations only refuse,
and are refused by, exclusive ones. Whether two patterns overlap is decided
exactly (``coordination.globs``). An agent is a key and an agent id: the same
name under another key is another agent (agent ids are claims).

A reservation ends at its own time, when its lease ends (a session lease: when
its agent's sockets are gone), or when it is released. ``Reservation.objects.live``
is the one definition every answer filters by; the sweeps only write the end
into the audit log and tell /ws/live/.

Races: the overlap search runs before the write lock, against the reservations
live then; under the lock only those created since (a larger fence: fences
follow the one audit order) are searched, and the conflicts found before are
kept only if still live. So concurrent creators never both win, and the search
does not hold up every other write."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from access.models import ApiKey
from audit.models import AuditAction
from common.errors import ApiError, ErrorCode, Invalid
from common.events import send_event_on_commit
from common.ids import AGENT_ID_HELP, is_agent_id
from common.inputs import is_json_integer, iso_time
from shards.writer import write_transaction
from shards.writetx import WriteTx

from .globs import Budget, BudgetSpent, glob_check, glob_match, is_valid_path, overlap_witness
from .leases import MAX_TTL, MIN_TTL, lease_expiry, lease_live, lease_owner_check
from .models import Lease, Reservation, is_reservation_id

MAX_PATTERNS = 64  # per reservation
MAX_CHECK_PATHS = 1000  # per check call
MAX_PATH = 4096
MAX_REASON = 500
MAX_LISTED = 1000


@dataclass(frozen=True)
class Agent:
    """Who holds a reservation: the agent id under the key that vouched for it."""

    agent_id: str
    key_prefix: str


def _others(agent: Agent) -> Q:
    return ~Q(holder=agent.agent_id, key_prefix=agent.key_prefix)


# --- the rules ----------------------------------------------------------------------


def reservation_patterns_check(patterns: Any) -> list[str]:
    """1 to MAX_PATTERNS distinct globs (``coordination.globs``), in the order sent."""
    if not isinstance(patterns, list) or not 1 <= len(patterns) <= MAX_PATTERNS:
        raise Invalid(
            f"patterns must be a list of 1 to {MAX_PATTERNS} glob patterns.",
            fields={"patterns": [f"A list of 1 to {MAX_PATTERNS} patterns."]},
        )
    checked: list[str] = []
    for index, pattern in enumerate(patterns):
        try:
            glob_check(pattern)
        except Invalid as error:
            raise Invalid(
                f"patterns[{index}]: {error.message}",
                fields={"patterns": [f"Item {index}: {error.message}"]},
            ) from None
        if pattern not in checked:
            checked.append(pattern)
    return checked


def reservation_budget() -> Budget:
    """The glob steps one request may spend comparing patterns and paths
    (``coordination.globs``, "Cost"): past it, 400 RESERVATION_TOO_COSTLY."""
    return Budget(settings.ZEROLOCK_RESERVATION_BUDGET_STEPS)


def _too_costly(spent: BudgetSpent) -> ApiError:
    return ApiError(
        ErrorCode.RESERVATION_TOO_COSTLY,
        f"Comparing these patterns or paths with the live reservations would take more "
        f"than {spent.steps} glob steps (ZEROLOCK_RESERVATION_BUDGET_STEPS); nothing was "
        "written. Send fewer patterns or paths, or ones with fewer wildcards, or a longer "
        "literal start such as 'src/app/'.",
        budget_steps=spent.steps,
    )


def reservations_conflicting(
    patterns: list[str], exclusive: bool, against: Iterable[Reservation], budget: Budget
) -> list[dict[str, Any]]:
    """Each reservation in ``against`` that the new one may not stand beside: one
    of the two is exclusive and some path matches a pattern of each. The first
    such pair names the overlap, with the shortest path both match. Raises
    BudgetSpent past the budget."""
    conflicts = []
    for other in against:
        if not (exclusive or other.exclusive):
            continue
        found = next(
            (
                (mine, theirs, witness)
                for mine in patterns
                for theirs in other.patterns
                if (witness := overlap_witness(mine, theirs, budget)) is not None
            ),
            None,
        )
        if found is not None:
            mine, theirs, witness = found
            conflicts.append(
                {"reservation": other, "pattern": mine, "overlaps": theirs, "example_path": witness}
            )
    return conflicts


def reservations_per_key_check(agent: Agent) -> None:
    """A key holds at most ZEROLOCK_MAX_RESERVATIONS_PER_KEY live reservations:
    every creation is compared with all of them, so their number is the cost
    (counted per key, not per agent id: agent ids are claims)."""
    limit = settings.ZEROLOCK_MAX_RESERVATIONS_PER_KEY
    live = Reservation.objects.live().filter(key_prefix=agent.key_prefix).count()
    if live >= limit:
        raise ApiError(
            ErrorCode.TOO_MANY_RESERVATIONS,
            f"This key already holds {live} live reservations, the most one key may hold "
            "(ZEROLOCK_MAX_RESERVATIONS_PER_KEY). Release some, or let them end.",
            limit=limit,
        )


def _ttl(ttl_seconds: Any, *, required: bool) -> int | None:
    if ttl_seconds is None and not required:
        return None
    if not is_json_integer(ttl_seconds) or not MIN_TTL <= ttl_seconds <= MAX_TTL:
        raise Invalid(
            f"ttl_seconds must be an integer from {MIN_TTL} to {MAX_TTL}"
            + ("." if required else ", or left out with a lease_id."),
            fields={"ttl_seconds": ["out of range" if ttl_seconds is not None else "required"]},
        )
    return int(ttl_seconds)


def _reason(reason: Any) -> str:
    if reason is None:
        return ""
    if not isinstance(reason, str) or len(reason) > MAX_REASON or "\x00" in reason:
        raise Invalid(
            f"reason must be a string of up to {MAX_REASON} characters.",
            fields={"reason": ["Not a valid reason."]},
        )
    return reason


def _exclusive(exclusive: Any) -> bool:
    if exclusive is None:
        return True
    if not isinstance(exclusive, bool):
        raise Invalid("exclusive must be true or false.", fields={"exclusive": ["Not a boolean."]})
    return exclusive


# --- reads --------------------------------------------------------------------------


def reservation_data(
    reservation: Reservation, names: dict[str, str] | None = None
) -> dict[str, Any]:
    if names is None:
        names = dict(
            ApiKey.objects.filter(prefix=reservation.key_prefix).values_list("prefix", "name")
        )
    return {
        "reservation_id": reservation.id,
        "patterns": reservation.patterns,
        "exclusive": reservation.exclusive,
        "holder": reservation.holder,
        "key": {"name": names.get(reservation.key_prefix, ""), "prefix": reservation.key_prefix},
        "reason": reservation.reason,
        "lease_id": reservation.lease_id,
        "ttl_seconds": reservation.ttl_seconds,
        "expires_at": iso_time(reservation.expires_at) if reservation.expires_at else None,
        "fence": reservation.fence,
        "created_at": iso_time(reservation.created_at),
    }


def _key_names(reservations: Iterable[Reservation]) -> dict[str, str]:
    prefixes = {r.key_prefix for r in reservations}
    return dict(ApiKey.objects.filter(prefix__in=prefixes).values_list("prefix", "name"))


def _listed(reservations: list[Reservation]) -> list[dict[str, Any]]:
    names = _key_names(reservations)
    return [reservation_data(r, names) for r in reservations]


def _path(path: Any, field: str) -> str:
    if not isinstance(path, str) or not 1 <= len(path) <= MAX_PATH or not is_valid_path(path):
        raise Invalid(
            f"{field} must be a relative path of up to {MAX_PATH} characters "
            "('/'-separated, no empty, '.' or '..' segment, no control character).",
            fields={field: ["Not a valid path."]},
        )
    return path


def reservations_list(*, holder: str | None = None, path: str | None = None) -> dict[str, Any]:
    """The live reservations, oldest first: all, one holder's, or those with a
    pattern matching ``path``. At most MAX_LISTED, with the count of all."""
    live = Reservation.objects.live().order_by("fence")
    if holder:
        if not is_agent_id(holder):
            raise Invalid(
                f"holder: agent ids are {AGENT_ID_HELP}.", fields={"holder": ["Not an agent id."]}
            )
        live = live.filter(holder=holder)
    rows = list(live)
    if path is not None:
        wanted = _path(path, "path")
        budget = reservation_budget()
        try:
            rows = [r for r in rows if any(glob_match(p, wanted, budget) for p in r.patterns)]
        except BudgetSpent as spent:
            raise _too_costly(spent) from None
    return {"results": _listed(rows[:MAX_LISTED]), "count": len(rows)}


def reservations_check(*, agent: Agent, paths: Any) -> dict[str, Any]:
    """For each path, the other agents' live exclusive reservations it falls in:
    what a pre-commit hook asks before this agent writes those files."""
    if not isinstance(paths, list) or not 1 <= len(paths) <= MAX_CHECK_PATHS:
        raise Invalid(
            f"paths must be a list of 1 to {MAX_CHECK_PATHS} paths.",
            fields={"paths": [f"A list of 1 to {MAX_CHECK_PATHS} paths."]},
        )
    wanted = [_path(p, f"paths[{i}]") for i, p in enumerate(paths)]
    held = list(Reservation.objects.live().filter(_others(agent), exclusive=True).order_by("fence"))
    budget = reservation_budget()
    try:
        hits = [
            (path, r)
            for path in dict.fromkeys(wanted)
            for r in held
            if any(glob_match(p, path, budget) for p in r.patterns)
        ]
    except BudgetSpent as spent:
        raise _too_costly(spent) from None
    names = _key_names(r for _, r in hits)
    return {
        "conflicts": [{"path": path, "reservation": reservation_data(r, names)} for path, r in hits]
    }


# --- writes -------------------------------------------------------------------------


def _refused(conflicts: list[dict[str, Any]]) -> ApiError:
    names = _key_names(c["reservation"] for c in conflicts)
    listed = [
        reservation_data(c["reservation"], names)
        | {"pattern": c["pattern"], "overlaps": c["overlaps"], "example_path": c["example_path"]}
        for c in conflicts
    ]
    first = listed[0]
    return ApiError(
        ErrorCode.RESERVATION_CONFLICT,
        f"{first['pattern']!r} overlaps {first['overlaps']!r}, reserved by {first['holder']!r} "
        f"(both match {first['example_path']!r})"
        + (f" and {len(listed) - 1} more reservation(s)." if len(listed) > 1 else "."),
        conflicts=listed,
    )


def reservation_create(
    *,
    agent: Agent,
    patterns: Any,
    exclusive: Any = None,
    ttl_seconds: Any = None,
    reason: Any = None,
    lease_id: Any = None,
) -> Reservation:
    checked = reservation_patterns_check(patterns)
    is_exclusive = _exclusive(exclusive)
    if lease_id is not None and not isinstance(lease_id, str):
        raise Invalid("lease_id must be a lease id.", fields={"lease_id": ["Not a string."]})
    ttl = _ttl(ttl_seconds, required=lease_id is None)
    why = _reason(reason)
    reservations_per_key_check(agent)  # early; the count that holds is under the lock
    budget = reservation_budget()
    try:
        # The search against what is live now, outside the lock (the module docstring).
        seen = list(Reservation.objects.live().filter(_others(agent)))
        seen_fence = max((r.fence for r in seen), default=0)
        found = reservations_conflicting(checked, is_exclusive, seen, budget)
    except BudgetSpent as spent:
        raise _too_costly(spent) from None
    with write_transaction() as tx:
        reservations_expire_due(tx)
        lease: Lease | None = None
        if lease_id is not None:
            lease = lease_live(lease_id)
            lease_owner_check(lease, holder=agent.agent_id, key_prefix=agent.key_prefix)
        reservations_per_key_check(agent)
        others = Reservation.objects.live().filter(_others(agent))
        if found:
            still = set(
                others.filter(pk__in=[c["reservation"].pk for c in found]).values_list(
                    "pk", flat=True
                )
            )
            found = [c for c in found if c["reservation"].pk in still]
        try:
            found += reservations_conflicting(
                checked, is_exclusive, others.filter(fence__gt=seen_fence), budget
            )
        except BudgetSpent as spent:
            raise _too_costly(spent) from None
        if found:
            raise _refused(found)
        now = timezone.now()
        reservation = Reservation(
            holder=agent.agent_id,
            key_prefix=agent.key_prefix,
            patterns=checked,
            exclusive=is_exclusive,
            reason=why,
            lease=lease,
            ttl_seconds=ttl,
            expires_at=lease_expiry(ttl, now) if ttl is not None else None,
            created_at=now,
        )
        entry = tx.audit.append(
            action=AuditAction.RESERVATION_CREATED,
            agent_id=agent.agent_id,
            key_prefix=agent.key_prefix,
            details={
                "reservation_id": reservation.id,
                "patterns": checked,
                "exclusive": is_exclusive,
                "ttl_seconds": ttl,
                "lease_id": lease_id,
                "reason": why,
            },
        )
        reservation.fence = entry.pk  # grows with every creation, like a lease's
        reservation.save(force_insert=True)
        _changed(reservation, "created")
    return reservation


def _live_reservation(reservation_id: Any) -> Reservation:
    found = None
    # An id of another shape is no reservation, and never reaches the database.
    if isinstance(reservation_id, str) and is_reservation_id(reservation_id):
        found = Reservation.objects.live().filter(pk=reservation_id).first()
    if found is None:
        raise ApiError(
            ErrorCode.RESERVATION_NOT_FOUND,
            f"No live reservation {reservation_id!r}: it was released, or it ended with "
            "its time or its lease.",
            reservation_id=reservation_id,
        )
    return found


def _owner_check(reservation: Reservation, agent: Agent, *, admin: bool = False) -> None:
    """Only its holder (agent and key) may touch a reservation; an admin key may
    release anyone's (an agent that died holding a reservation without a ttl's end
    in sight), and that is audited under the admin's name."""
    if admin:
        return
    if reservation.holder != agent.agent_id or reservation.key_prefix != agent.key_prefix:
        raise ApiError(
            ErrorCode.PERMISSION_DENIED,
            f"Reservation {reservation.id} is held by another agent or key: only its holder "
            "(or an admin key) may change it.",
        )


def reservation_keepalive(*, agent: Agent, reservation_id: str) -> Reservation:
    """Another ``ttl_seconds`` from now. A reservation without its own ttl lives as
    long as its lease: keep the lease alive instead (answered unchanged)."""
    with write_transaction() as tx:
        reservations_expire_due(tx)
        reservation = _live_reservation(reservation_id)
        _owner_check(reservation, agent)
        if reservation.ttl_seconds is not None:
            reservation.expires_at = lease_expiry(reservation.ttl_seconds, timezone.now())
            reservation.save(update_fields=["expires_at"])
    return reservation


def reservation_release(*, agent: Agent, reservation_id: str, admin: bool = False) -> None:
    with write_transaction() as tx:
        reservations_expire_due(tx)
        reservation = _live_reservation(reservation_id)
        _owner_check(reservation, agent, admin=admin)
        by_holder = (
            reservation.holder == agent.agent_id and reservation.key_prefix == agent.key_prefix
        )
        _end(tx, reservation, "released", by=None if by_holder else agent)


def _end(tx: WriteTx, reservation: Reservation, why: str, *, by: Agent | None = None) -> None:
    """The one way a reservation's end is written: marked, audited, told."""
    reservation.ended = True
    reservation.save(update_fields=["ended"])
    details: dict[str, Any] = {"reservation_id": reservation.id, "why": why}
    if by is not None:
        details["released_by"] = {"agent_id": by.agent_id, "key_prefix": by.key_prefix}
    tx.audit.append(
        action=AuditAction.RESERVATION_ENDED,
        agent_id=reservation.holder,
        key_prefix=reservation.key_prefix,
        details=details,
    )
    _changed(reservation, why)


def _changed(reservation: Reservation, event: str) -> None:
    send_event_on_commit(
        "reservation_changed",
        reservation={
            "reservation_id": reservation.id,
            "holder": reservation.holder,
            "patterns": reservation.patterns,
            "exclusive": reservation.exclusive,
        },
        event=event,
    )


def reservations_expire_due(tx: WriteTx) -> int:
    """Writes the end of every reservation past its own time (they are already out
    of every answer: ``Reservation.objects.live``)."""
    due = list(Reservation.objects.due())
    for reservation in due:
        _end(tx, reservation, "expired")
    return len(due)


def reservations_end_with_lease(tx: WriteTx, lease: Lease, why: str) -> None:
    """A lease ended (``why``: expired, revoked): so do the reservations bound to it."""
    for reservation in Reservation.objects.filter(lease=lease, ended=False):
        _end(tx, reservation, f"lease {why}")


def reservations_expire_now() -> int:
    """The tick sweep (once a second in a process with agent sockets, and beat):
    one indexed query when nothing is due."""
    if not Reservation.objects.due().exists():
        return 0
    with write_transaction() as tx:
        return reservations_expire_due(tx)
