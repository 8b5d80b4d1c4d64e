"""Writes to shards: create, commit (decision shards, OCC), merge (additive
shards, CRDT), delete. Each rule is one function here: the owner rule
(``owner_check``), the irreversibility gate (``gate_check``), read-set
validation (``read_set_stale_entries``), the CRDT merge
(``additive_apply_locked``); schema validation lives in ``value_schema``, and
the version write itself in ``writer``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from access.auth import Actor
from audit.chain import AuditWriter, audited_transaction
from audit.models import AuditAction
from audit.rejections import rejection_entry, rejections
from common import hotsql
from common.errors import ApiError
from common.events import send_event_on_commit
from common.inputs import is_json_integer

from . import crdt, crdt_store, crdt_update
from .deliveries import recorder
from .hooks import hooks
from .models import CrdtUpdate, Delivery, OwnerPolicy, Shard, ShardType
from .selectors import ShardNotFound, shard_current_value, shard_get
from .value_schema import additions_validate, merged_validate, schema_check, value_validate
from .writer import (
    CommitResult,
    conflict_record,
    group_commit,
    version_write,
    write_transaction,
)

__all__ = [
    "Actor",
    "CommitResult",
    "additive_commit",
    "additive_update_apply",
    "commit_rules_check",
    "gate_check",
    "owner_check",
    "shard_commit",
    "shard_create",
    "shard_current_value",
    "shard_delete",
    "shard_get",
    "shard_read",
    "value_validate",
]


# --- rules -----------------------------------------------------------------


def gate_check(
    shard: Shard,
    approval_id: str | None,
    *,
    agent_id: str = "",
    expected_version: int | None = None,
    new_value: Any = None,
) -> None:
    """Irreversible shards take a commit only with a matching, approved, unused
    approval (checked here before anything is attempted; the single use again in
    the commit's transaction). With no gate registered, an irreversible shard
    takes no commit at all (fail closed)."""
    if approval_id:
        if expected_version is None:
            raise ApiError(
                403,
                "APPROVAL_INVALID",
                "Approvals apply to decision shards only.",
                reason="NOT_APPLICABLE",
            )
        if hooks.gate is None:
            raise ApiError(
                403,
                "APPROVAL_INVALID",
                "No approval gate is installed on this server.",
                reason="NO_GATE",
            )
        hooks.gate.verify(
            approval_id=approval_id,
            shard_id=shard.id,
            agent_id=agent_id,
            expected_version=expected_version,
            new_value=new_value,
        )
        return
    if not shard.reversible:
        raise ApiError(
            403,
            "APPROVAL_REQUIRED",
            f"Shard {shard.id!r} is irreversible: request an approval first "
            "(POST /api/approvals/request).",
            shard_id=shard.id,
        )


def fence_parse(raw: Any) -> int | None:
    """An optional lease fence in a request body: a positive 64-bit integer."""
    if raw is None:
        return None
    if not is_json_integer(raw) or not 1 <= raw < 2**63:
        raise ApiError(
            400,
            "VALIDATION_ERROR",
            "fence must be a positive integer.",
            fields={"fence": ["invalid"]},
        )
    return raw


def owner_check(shard: Shard, agent_id: str) -> None:
    if shard.owner_policy == OwnerPolicy.OWNERS_ONLY and agent_id not in shard.owners:
        raise ApiError(
            403, "NOT_AN_OWNER", f"Only the owners of {shard.id!r} may commit.", owners=shard.owners
        )


def read_set_stale_entries(read_set: dict[str, int]) -> list[dict[str, Any]]:
    if not read_set:
        return []
    current = dict(Shard.objects.filter(id__in=list(read_set)).values_list("id", "version"))
    return [
        {"shard_id": sid, "read_version": read, "current_version": current.get(sid)}
        for sid, read in sorted(read_set.items())
        if current.get(sid) != read
    ]


# --- shards ------------------------------------------------------------------


def shard_read(*, shard_id: str, reader: str) -> Shard:
    """Reads a shard and records the delivery (who saw which version)."""
    if any_write_sweep_due():  # a read never shows what an expired lease held
        with write_transaction():
            pass  # its sweeps are the point: what expired is ended before the read
    shard = shard_get(shard_id)
    shard.value = shard_current_value(shard)
    recorder.record(agent_id=reader, shard_id=shard.id, version=shard.version)
    return shard


def any_write_sweep_due() -> bool:
    """Cheap, lock-free: would a write sweep find anything to do now?"""
    due = hooks.write_sweeps_due
    return any(check() for check in list(due.values()))


def shard_create(
    *,
    actor: Actor,
    shard_id: str,
    shard_type: str,
    crdt_type: str | None = None,
    initial_value: Any = None,
    reversible: bool = True,
    approvals_required: int = 1,
    value_schema: Any = None,
    owner_policy: str = OwnerPolicy.SINGLE_WRITER,
    owners: list[str] | None = None,
) -> Shard:
    crdt_state = None
    if shard_type == ShardType.ADDITIVE:
        if crdt_type is None:
            raise ApiError(
                400, "VALIDATION_ERROR", "Additive shards need crdt_type: map, array or text."
            )
        initial_value = crdt.initial_json(crdt_type, initial_value)
        crdt_state = crdt.new_state(crdt_type, initial_value)
        shard_size_check(shard_id, len(crdt_state))
    elif crdt_type is not None:
        raise ApiError(400, "VALIDATION_ERROR", "crdt_type is only for additive shards.")
    schema_check(value_schema)
    value_validate(value_schema, initial_value)
    with audited_transaction() as audit:
        if Shard.objects.filter(pk=shard_id).exists():
            raise ApiError(
                409, "SHARD_EXISTS", f"Shard {shard_id!r} already exists.", shard_id=shard_id
            )
        now = timezone.now()
        shard = Shard.objects.create(
            id=shard_id,
            type=shard_type,
            crdt_type=crdt_type,
            owner_policy=owner_policy,
            owners=owners or [],
            reversible=reversible,
            approvals_required=approvals_required,
            value_schema=value_schema,
            value=initial_value,
            crdt_state=crdt_state,
            version=1,
            created_by=actor.agent_id,
            updated_by=actor.agent_id,
            created_at=now,
            updated_at=now,
        )
        audit.append(
            action=AuditAction.SHARD_CREATE,
            agent_id=actor.agent_id,
            key_prefix=actor.key_prefix,
            shard_id=shard_id,
            version_after=1,
            value=initial_value,
            details={"type": shard_type, "reversible": reversible, "owner_policy": owner_policy},
        )
    return shard


def shard_commit(
    *,
    actor: Actor,
    shard: Shard,
    expected_version: int,
    new_value: Any,
    read_set: dict[str, int] | None = None,
    approval_id: str | None = None,
    fence: int | None = None,
) -> CommitResult:
    """Commit to a decision shard: exactly one commit wins per version.
    ``shard`` supplies the rules (``shard_get(..., payload=False)``); the version
    check itself is against the database."""
    started = time.perf_counter()
    shard_id = shard.id
    try:
        owner_check(shard, actor.agent_id)
        gate_check(
            shard,
            approval_id,
            agent_id=actor.agent_id,
            expected_version=expected_version,
            new_value=new_value,
        )
    except ApiError as refusal:
        _audit_rejection(actor, shard_id, expected_version, refusal)
        raise
    value_validate(shard.value_schema, new_value)
    try:
        _stale_precheck(actor, shard, expected_version, new_value)
        return _commit_locked(
            actor=actor,
            shard=shard,
            expected_version=expected_version,
            new_value=new_value,
            read_set=read_set,
            approval_id=approval_id,
            fence=fence,
        )
    except ApiError as refusal:
        if refusal.status == 409:
            conflict_record(shard_id=shard_id, started=started)
        raise


def _commit_locked(
    *,
    actor: Actor,
    shard: Shard,
    expected_version: int,
    new_value: Any,
    read_set: dict[str, int] | None,
    approval_id: str | None,
    fence: int | None,
) -> CommitResult:
    shard_id = shard.id

    def commit(audit: AuditWriter) -> CommitResult | ApiError:
        stale = read_set_stale_entries(read_set or {})
        rejection: ApiError
        if stale:
            rejection = ApiError(
                409,
                "READ_SET_STALE",
                "Shards this decision was based on have moved on.",
                stale=stale,
            )
        else:
            result = version_write(
                audit=audit,
                shard=shard,
                actor=actor,
                expected_version=expected_version,
                value=new_value,
                fence=fence,
                details={"approval_id": approval_id} if approval_id else None,
            )
            if result is not None:
                if approval_id:
                    _approval_used(audit, actor, shard_id, approval_id, result)
                return result
            current = (
                Shard.objects.filter(pk=shard_id, incarnation=shard.incarnation)
                .values("version", "value")
                .first()
            )
            if current is None:
                rejection = ShardNotFound(shard_id)
            else:
                rejection = _stale_error(actor, expected_version, current)
                _conflict_told(actor, shard_id, current, new_value)
        # Returned, not raised: the refusal's audit entry commits with the batch.
        _append_rejection(audit, actor, shard_id, expected_version, rejection)
        return rejection

    outcome = group_commit.run(commit)
    if isinstance(outcome, ApiError):
        raise outcome
    return outcome


def _approval_used(
    audit: AuditWriter, actor: Actor, shard_id: str, approval_id: str, result: CommitResult
) -> None:
    """The approval a commit carried is spent, in the commit's transaction."""
    assert hooks.gate is not None  # gate_check refused the commit otherwise
    commit = {"version": result.version, "audit_entry_id": result.audit_entry_id}
    hooks.gate.consume(approval_id=approval_id, commit=commit)
    audit.append(
        action=AuditAction.APPROVAL_COMMITTED,
        agent_id=actor.agent_id,
        key_prefix=actor.key_prefix,
        shard_id=shard_id,
        details={"approval_id": approval_id, **commit},
    )


def _stale_precheck(actor: Actor, shard: Shard, expected_version: int, new_value: Any) -> None:
    """Versions only grow: if the shard is already past ``expected_version`` the
    commit is doomed, and it is refused without queueing for the write lock.

    Two reads, no lock: the first is the rules read the caller just made
    (``shard``, no payload), the refusal reports the second. A version at or
    below the expected one is left to the locked path (it may yet become
    current), and so is a second read equal to it (a delete and re-create in
    between), so a 409 never reports ``current_version == expected_version``."""
    shard_id = shard.id
    if shard.version <= expected_version:
        return  # decided under the lock, as before
    # The value (possibly large) only for a refusal, which carries it.
    current = Shard.objects.filter(pk=shard_id).values("version", "value").first()
    if current is None or current["version"] == expected_version:
        return
    rejection = _stale_error(actor, expected_version, current)
    rejections.record(
        agent_id=actor.agent_id,
        key_prefix=actor.key_prefix,
        shard_id=shard_id,
        expected=expected_version,
        code=rejection.code,
    )
    _conflict_told(actor, shard_id, current, new_value)
    raise rejection


def _conflict_told(actor: Actor, shard_id: str, current: Mapping[str, Any], rejected: Any) -> None:
    """The loser of a race hears what won and how its value differs (Layer 3);
    a key that may not read the shard hears only that it lost, and to which version."""
    send_event_on_commit(
        "conflict",
        key_prefix=actor.key_prefix,
        agent_id=actor.agent_id,
        shard_id=shard_id,
        version=current["version"],
        winning=current["value"] if actor.sees_values else None,
        rejected=rejected,
        winner_shown=actor.sees_values,
    )


def _stale_error(actor: Actor, expected_version: int, current: Mapping[str, Any]) -> ApiError:
    values = {"current_value": current["value"]} if actor.sees_values else {}
    return ApiError(
        409,
        "STALE_VERSION",
        f"Version {expected_version} is not current (current is {current['version']}).",
        expected_version=expected_version,
        current_version=current["version"],
        **values,
    )


def additive_commit(*, actor: Actor, shard: Shard, body: dict[str, Any]) -> CommitResult:
    """Commit to an additive shard: merged, never compared against a version, so
    it can never be stale. Structurally separate from the OCC path."""
    commit_rules_check(actor, shard, body.get("approval_id"))
    op = crdt.parse_op(shard.crdt_kind, body)
    fence = fence_parse(body.get("fence"))
    # What the schema says of each added item or key is checked here, outside the
    # write lock; only the whole-value keywords (maxItems, required, ...) under it.
    checked = additions_validate(shard.value_schema, shard.crdt_kind, crdt.additions(op))

    def change(doc: Any, value: Any) -> tuple[bytes | None, Any]:
        return crdt.apply_op(shard.crdt_kind, doc, value, op)

    result = group_commit.run(
        lambda audit: additive_apply_locked(
            audit=audit,
            actor=actor,
            shard=shard,
            change=change,
            op_json=op.as_json(),
            fence=fence,
            additions_checked=checked,
        )
    )
    assert result is not None  # a parsed op always changes the Doc
    return result


def additive_update_apply(
    *, actor: Actor, shard: Shard, update: bytes, origin: str = ""
) -> CommitResult | None:
    """A Yjs update from a CRDT client on /ws/crdt/: merged, persisted, versioned and
    audited like a REST commit. None when it held nothing the shard lacked."""
    if crdt.is_empty_update(update):
        return None
    commit_rules_check(actor, shard, None)
    # Read before the write lock, in time proportional to the update: nothing of
    # an update that reaches past the shard's root ever touches its Doc.
    reach = crdt_update.update_check(shard.crdt_kind, update)

    def change(doc: Any, value: Any) -> tuple[bytes | None, Any]:
        return crdt.apply_update(shard.crdt_kind, doc, update, reach)

    with write_transaction() as audit:
        return additive_apply_locked(
            audit=audit, actor=actor, shard=shard, change=change, op_json=None, origin=origin
        )


def commit_rules_check(actor: Actor, shard: Shard, approval_id: str | None) -> None:
    """Owners, then the gate, for a write that names no version of its own (an
    additive operation, a claim): a refusal is audited as a commit's is."""
    try:
        owner_check(shard, actor.agent_id)
        gate_check(shard, approval_id)
    except ApiError as refusal:
        _audit_rejection(actor, shard.id, shard.version, refusal)
        raise


def additive_apply_locked(
    *,
    audit: AuditWriter,
    actor: Actor,
    shard: Shard,
    change: Callable[[Any, Any], tuple[bytes | None, Any]],
    op_json: dict[str, Any] | None,
    origin: str = "",
    fence: int | None = None,
    additions_checked: bool = False,
) -> CommitResult | None:
    """The CRDT merge: one change applied to the shard's Doc under the write lock
    (the caller's write transaction), its update logged in that transaction,
    then pushed to Yjs clients. ``op_json`` None means a raw Yjs update.
    ``additions_checked``: the caller checked what the change adds
    (``additions_validate``), so only the whole-value keywords are left."""
    shard_id = shard.id
    # Re-read under the write lock: the database is the only truth. The rules in
    # ``shard`` hold for its incarnation only: a shard deleted (and perhaps
    # re-created) since they were read is refused, never written with old rules.
    row = hotsql.select_one(
        Shard, ("version", "crdt_state_version"), id=shard_id, incarnation=shard.incarnation
    )
    if row is None:
        raise ShardNotFound(shard_id)
    loaded = audit.fresh_docs.pop(shard_id, None)  # an earlier write of this transaction's
    if loaded is None or (loaded.version, loaded.incarnation) != (
        row["version"],
        shard.incarnation,
    ):
        loaded = crdt_store.load(shard_id, shard.crdt_kind, row["version"], shard.incarnation)
    crdt_store.forget(shard_id)  # the Doc changes in place below; re-cached on commit
    update, value = change(loaded.doc, loaded.value)
    if update is None:
        return None  # left uncached: the Doc may hold the update's pending parts
    version = row["version"] + 1
    stored, snapshot = stored_after(
        shard_id,
        loaded,
        update,
        compact=version - row["crdt_state_version"] >= crdt_store.COMPACT_EVERY,
    )
    merged_validate(shard.value_schema, shard.crdt_kind, value, additions_checked=additions_checked)
    if op_json is None:
        op_json = crdt.yjs_op(update)
    columns: dict[str, Any] = {}
    if snapshot is not None:
        columns = {"crdt_state": snapshot, "crdt_state_version": version, "value": value}
    result = version_write(
        audit=audit,
        shard=shard,
        actor=actor,
        expected_version=row["version"],
        value=value,
        columns=columns,
        audit_value=op_json,
        fence=fence,
        details={"crdt_type": shard.crdt_type},
    )
    if result is None:  # cannot happen under the lock; refuse rather than guess
        raise ShardNotFound(shard_id)
    hotsql.insert(
        CrdtUpdate, {"shard_id": shard_id, "version": version, "update": update, "op": op_json}
    )
    send_event_on_commit("crdt_update", shard_id=shard_id, update=update, origin=origin)
    # Last: only a write that got this far leaves its Doc for the next one.
    audit.fresh_docs[shard_id] = crdt_store.Loaded(
        version, loaded.doc, value, shard.incarnation, stored
    )
    return result


def stored_after(
    shard_id: str, loaded: crdt_store.Loaded, update: bytes, *, compact: bool
) -> tuple[int, bytes | None]:
    """What the database will hold of the shard's Doc once ``update`` (already
    applied to ``loaded.doc``) is logged, and the snapshot to store with it
    (None: the update only joins the log).

    The per-shard cap (ZEROLOCK_MAX_SHARD_BYTES) holds what the database keeps
    of the Doc, the snapshot plus the updates logged after it: a running count,
    so a write under the cap costs an addition, never an encoding of the Doc
    under the write lock (20-36 ms for 7.3 MB of small records, measured). A write that would take the
    count past the cap, or that is due to compact the log, encodes the Doc: the
    encoding becomes the snapshot if it fits (the log starts again from it, so
    updates that only replaced or deleted content free their room), and 413
    SHARD_TOO_LARGE if it does not. So nothing past the cap is ever stored."""
    stored = loaded.stored_bytes + len(update)
    if stored <= settings.ZEROLOCK_MAX_SHARD_BYTES and not compact:
        return stored, None
    snapshot = loaded.doc.get_update()
    shard_size_check(shard_id, len(snapshot))
    return len(snapshot), snapshot


def shard_size_check(shard_id: str, size: int) -> None:
    """An additive shard's Yjs document, encoded, is at most ZEROLOCK_MAX_SHARD_BYTES."""
    limit = settings.ZEROLOCK_MAX_SHARD_BYTES
    if size > limit:
        raise ApiError(
            413,
            "SHARD_TOO_LARGE",
            f"Shard {shard_id!r} would hold {size} bytes (its Yjs document, encoded); "
            f"an additive shard holds at most {limit}.",
            shard_id=shard_id,
            limit_bytes=limit,
        )


def _append_rejection(
    audit: AuditWriter, actor: Actor, shard_id: str, expected: int, error: ApiError
) -> None:
    # The same record, checked the same way, as the batched refusals.
    audit.append(
        **rejection_entry(
            agent_id=actor.agent_id,
            key_prefix=actor.key_prefix,
            shard_id=shard_id,
            expected=expected,
            code=error.code,
        )
    )


def _audit_rejection(actor: Actor, shard_id: str, expected: int, error: ApiError) -> None:
    with audited_transaction() as audit:
        _append_rejection(audit, actor, shard_id, expected, error)


def shard_delete(*, actor: Actor, shard_id: str) -> None:
    """Deletes a shard and what is bound to it (the registered delete hooks: a
    lease's bindings, open approvals), and on commit its Yjs sockets are closed
    and its subscribers told and unsubscribed. A shard later created under the
    same id is a new incarnation that none of the old state can reach."""
    with audited_transaction() as audit:
        shard = shard_get(shard_id, payload=False)
        shard.delete()
        for hook in list(hooks.delete_hooks.values()):
            hook(audit, shard_id)
        audit.append(
            action=AuditAction.SHARD_DELETE,
            agent_id=actor.agent_id,
            key_prefix=actor.key_prefix,
            shard_id=shard_id,
            version_before=shard.version,
        )
        transaction.on_commit(lambda: crdt_store.forget(shard_id))
        send_event_on_commit("shard_deleted", shard_id=shard_id, deleted_by=actor.agent_id)


def delivery_prune(*, now: datetime | None = None) -> int:
    cutoff = (now or timezone.now()) - timedelta(days=settings.ZEROLOCK_DELIVERY_RETENTION_DAYS)
    deleted, _ = Delivery.objects.older_than(cutoff).delete()
    return deleted
