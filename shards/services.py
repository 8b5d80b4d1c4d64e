"""Writes. Each domain rule lives in one function here: the OCC check
(``occ_apply``), the irreversibility gate (``gate_check``), read-set validation
(``read_set_stale_entries``); schema validation (``schema_check``,
``value_validate``) lives in ``value_schema`` and is re-exported here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from approvals.gate import approval_consume, approval_verify

from . import crdt, crdt_store, push
from .audit import AuditWriter, audited_transaction
from .auth import generate_raw_key
from .deliveries import recorder
from .errors import ApiError
from .leases import fence_check, lease_bindings_drop, leases_expire_due
from .models import (
    ApiKey,
    ApiKeyPermission,
    AuditAction,
    CrdtUpdate,
    Delivery,
    Lease,
    OwnerPolicy,
    Shard,
    ShardType,
)
from .rejections import rejection_entry, rejections
from .value_schema import schema_check, value_validate


@dataclass(frozen=True)
class Actor:
    agent_id: str
    key_prefix: str = ""


@dataclass(frozen=True)
class CommitResult:
    version: int
    value: Any
    audit_entry_id: int

    def as_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies the value, which can be large.
        return {"version": self.version, "value": self.value, "audit_entry_id": self.audit_entry_id}


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
    the commit's transaction). A refused write is not held anywhere."""
    if approval_id:
        if expected_version is None:
            raise ApiError(
                403,
                "APPROVAL_INVALID",
                "Approvals apply to decision shards only.",
                reason="NOT_APPLICABLE",
            )
        approval_verify(
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


def occ_apply(
    *,
    shard_id: str,
    expected_version: int,
    new_value: Any,
    agent_id: str,
    incarnation: Any = None,
) -> bool:
    """The OCC check: one conditional UPDATE. Zero rows touched means someone else's
    commit already took ``expected_version`` (or, with ``incarnation``, the shard
    whose rules were checked has been deleted: a re-created one is another shard)."""
    rows = Shard.objects.filter(pk=shard_id, version=expected_version)
    if incarnation is not None:
        rows = rows.filter(incarnation=incarnation)
    touched = rows.update(
        value=new_value,
        version=F("version") + 1,
        updated_by=agent_id,
        updated_at=timezone.now(),
    )
    return touched == 1


# --- shards ------------------------------------------------------------------


def shard_get(shard_id: str, *, payload: bool = True) -> Shard:
    shards = Shard.objects.all() if payload else Shard.objects.without_payload()
    shard = shards.filter(pk=shard_id).first()
    if shard is None:
        raise ApiError(404, "SHARD_NOT_FOUND", f"No shard {shard_id!r}.", shard_id=shard_id)
    return shard


def shard_read(*, shard_id: str, reader: str) -> Shard:
    """Reads a shard and records the delivery (who saw which version)."""
    if Lease.objects.due().exists():  # a read never shows what an expired lease held
        leases_expire_due()
    shard = shard_get(shard_id)
    shard.value = shard_current_value(shard)
    recorder.record(agent_id=reader, shard_id=shard.id, version=shard.version)
    return shard


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
    _stale_precheck(actor, shard_id, expected_version, new_value)

    rejection: ApiError | None = None
    leases_expire_due()  # usually one indexed "any due?" query, outside the write lock
    with audited_transaction() as audit:
        fence_check(shard_ids={shard_id}, fence=fence)
        stale = read_set_stale_entries(read_set or {})
        if stale:
            rejection = ApiError(
                409,
                "READ_SET_STALE",
                "Shards this decision was based on have moved on.",
                stale=stale,
            )
        elif occ_apply(
            shard_id=shard_id,
            incarnation=shard.incarnation,
            expected_version=expected_version,
            new_value=new_value,
            agent_id=actor.agent_id,
        ):
            entry = audit.append(
                action=AuditAction.SHARD_COMMIT,
                agent_id=actor.agent_id,
                key_prefix=actor.key_prefix,
                shard_id=shard_id,
                version_before=expected_version,
                version_after=expected_version + 1,
                value=new_value,
                details={"approval_id": approval_id} if approval_id else None,
            )
            transaction.on_commit(
                lambda: push.shard_changed(
                    shard_id=shard_id, version=expected_version + 1, committed_by=actor.agent_id
                )
            )
            if approval_id:
                commit = {"version": expected_version + 1, "audit_entry_id": entry.pk}
                approval_consume(approval_id=approval_id, commit=commit)
                audit.append(
                    action=AuditAction.APPROVAL_COMMITTED,
                    agent_id=actor.agent_id,
                    key_prefix=actor.key_prefix,
                    shard_id=shard_id,
                    details={"approval_id": approval_id, **commit},
                )
            return CommitResult(expected_version + 1, new_value, entry.pk)
        else:
            current = (
                Shard.objects.filter(pk=shard_id, incarnation=shard.incarnation)
                .values("version", "value")
                .first()
            )
            if current is None:
                rejection = ApiError(
                    404, "SHARD_NOT_FOUND", f"No shard {shard_id!r}.", shard_id=shard_id
                )
            else:
                rejection = _stale_error(expected_version, current)
                transaction.on_commit(
                    lambda: push.conflict_notify(
                        key_prefix=actor.key_prefix,
                        agent_id=actor.agent_id,
                        shard_id=shard_id,
                        version=current["version"],
                        winning=current["value"],
                        rejected=new_value,
                    )
                )
        _append_rejection(audit, actor, shard_id, expected_version, rejection)
    raise rejection


def _shard_version(shard_id: str) -> int | None:
    return Shard.objects.filter(pk=shard_id).values_list("version", flat=True).first()


def _stale_precheck(actor: Actor, shard_id: str, expected_version: int, new_value: Any) -> None:
    """Versions only grow: if the shard is already past ``expected_version`` the
    commit is doomed, and it is refused without queueing for the write lock.

    Two reads, no lock: the refusal reports the second. A version at or below
    the expected one is left to the locked path (it may yet become current), and
    so is a second read equal to it (a delete and re-create in between), so a
    409 never reports ``current_version == expected_version``."""
    version = _shard_version(shard_id)
    if version is None or version <= expected_version:
        return  # decided under the lock, as before
    # The value (possibly large) only for a refusal, which carries it.
    current = Shard.objects.filter(pk=shard_id).values("version", "value").first()
    if current is None or current["version"] == expected_version:
        return
    rejection = _stale_error(expected_version, current)
    rejections.record(
        agent_id=actor.agent_id,
        key_prefix=actor.key_prefix,
        shard_id=shard_id,
        expected=expected_version,
        code=rejection.code,
    )
    push.conflict_notify(
        key_prefix=actor.key_prefix,
        agent_id=actor.agent_id,
        shard_id=shard_id,
        version=current["version"],
        winning=current["value"],
        rejected=new_value,
    )
    raise rejection


def _stale_error(expected_version: int, current: dict[str, Any]) -> ApiError:
    return ApiError(
        409,
        "STALE_VERSION",
        f"Version {expected_version} is not current (current is {current['version']}).",
        expected_version=expected_version,
        current_version=current["version"],
        current_value=current["value"],
    )


def additive_commit(*, actor: Actor, shard: Shard, body: dict[str, Any]) -> CommitResult:
    """Commit to an additive shard: merged, never compared against a version, so
    it can never be stale. Structurally separate from the OCC path."""
    _additive_rules_check(actor, shard, body.get("approval_id"))
    op = crdt.parse_op(shard.crdt_type, body)

    def change(doc: Any, value: Any) -> tuple[bytes, Any]:
        return crdt.apply_op(shard.crdt_type, doc, value, op)

    result = _additive_apply(actor=actor, shard=shard, change=change, op_json=op.as_json())
    assert result is not None  # a parsed op always changes the Doc
    return result


def additive_update_apply(
    *, actor: Actor, shard: Shard, update: bytes, origin: str = ""
) -> CommitResult | None:
    """A Yjs update from a CRDT client on /ws/crdt/: merged, persisted, versioned and
    audited like a REST commit. None when it held nothing the shard lacked."""
    if crdt.is_empty_update(update):
        return None
    _additive_rules_check(actor, shard, None)

    def change(doc: Any, value: Any) -> tuple[bytes | None, Any]:
        return crdt.apply_update(shard.crdt_type, doc, update)

    return _additive_apply(actor=actor, shard=shard, change=change, op_json=None, origin=origin)


def _additive_rules_check(actor: Actor, shard: Shard, approval_id: str | None) -> None:
    try:
        owner_check(shard, actor.agent_id)
        gate_check(shard, approval_id)
    except ApiError as refusal:
        _audit_rejection(actor, shard.id, shard.version, refusal)
        raise


def _additive_apply(
    *,
    actor: Actor,
    shard: Shard,
    change: Callable[[Any, Any], tuple[bytes | None, Any]],
    op_json: dict[str, Any] | None,
    origin: str = "",
) -> CommitResult | None:
    with audited_transaction() as audit:
        return additive_apply_locked(
            audit=audit, actor=actor, shard=shard, change=change, op_json=op_json, origin=origin
        )


def additive_apply_locked(
    *,
    audit: AuditWriter,
    actor: Actor,
    shard: Shard,
    change: Callable[[Any, Any], tuple[bytes | None, Any]],
    op_json: dict[str, Any] | None,
    origin: str = "",
) -> CommitResult | None:
    """The CRDT merge: one change applied to the shard's Doc under the write lock
    (the caller's audited transaction), its update logged in that transaction,
    then pushed to Yjs clients. ``op_json`` None means a raw Yjs update."""
    shard_id = shard.id
    # Re-read under the write lock: the database is the only truth. The rules in
    # ``shard`` hold for its incarnation only: a shard deleted (and perhaps
    # re-created) since they were read is refused, never written with old rules.
    row = (
        Shard.objects.filter(pk=shard_id, incarnation=shard.incarnation)
        .values("version", "crdt_state_version")
        .first()
    )
    if row is None:
        raise ApiError(404, "SHARD_NOT_FOUND", f"No shard {shard_id!r}.", shard_id=shard_id)
    loaded = crdt_store.load(shard_id, shard.crdt_type, row["version"], shard.incarnation)
    crdt_store.forget(shard_id)  # the Doc changes in place below; re-cached on commit
    update, value = change(loaded.doc, loaded.value)
    if update is None:
        return None  # left uncached: the Doc may hold the update's pending parts
    value_validate(shard.value_schema, value)
    if op_json is None:
        op_json = crdt.yjs_op(update)
    version = row["version"] + 1
    CrdtUpdate.objects.create(shard_id=shard_id, version=version, update=update, op=op_json)
    fields: dict[str, Any] = {
        "version": version,
        "updated_by": actor.agent_id,
        "updated_at": timezone.now(),
    }
    if version - row["crdt_state_version"] >= crdt_store.COMPACT_EVERY:
        fields.update(crdt_state=loaded.doc.get_update(), crdt_state_version=version, value=value)
    Shard.objects.filter(pk=shard_id).update(**fields)
    entry = audit.append(
        action=AuditAction.SHARD_COMMIT,
        agent_id=actor.agent_id,
        key_prefix=actor.key_prefix,
        shard_id=shard_id,
        version_before=version - 1,
        version_after=version,
        value=op_json,
        details={"crdt_type": shard.crdt_type},
    )
    fresh = crdt_store.Loaded(version, loaded.doc, value, shard.incarnation)

    def after_commit() -> None:
        crdt_store.remember(shard_id, fresh)
        push.crdt_update_push(shard_id=shard_id, update=update, origin=origin)
        push.shard_changed(shard_id=shard_id, version=version, committed_by=actor.agent_id)

    transaction.on_commit(after_commit)
    return CommitResult(version, value, entry.pk)


def shard_current_value(shard: Shard) -> Any:
    """A shard's value as of its row: additive shards replay their update log."""
    if shard.type != ShardType.ADDITIVE:
        return shard.value
    loaded = crdt_store.load(shard.id, shard.crdt_type, shard.version, shard.incarnation)
    shard.version = loaded.version  # newer if a compaction overtook this read
    return loaded.value


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
    """Deletes a shard and what is bound to it: leases let go of its paths (no
    write anywhere), and on commit its Yjs sockets are closed and its subscribers
    told and unsubscribed. A shard later created under the same id is a new
    incarnation that none of the old state can reach."""
    with audited_transaction() as audit:
        shard = shard_get(shard_id, payload=False)
        shard.delete()
        lease_bindings_drop(shard_id=shard_id)
        _approvals_end(audit, shard_id)
        audit.append(
            action=AuditAction.SHARD_DELETE,
            agent_id=actor.agent_id,
            key_prefix=actor.key_prefix,
            shard_id=shard_id,
            version_before=shard.version,
        )

        def after_commit() -> None:
            crdt_store.forget(shard_id)
            push.shard_deleted(shard_id=shard_id, deleted_by=actor.agent_id)

        transaction.on_commit(after_commit)


def _approvals_end(audit: AuditWriter, shard_id: str) -> None:
    """A deleted shard's open approvals (pending, or approved and not yet applied)
    expire with it: approved against this shard, they must never apply to a shard
    re-created under its id."""
    from approvals.models import Approval, ApprovalStatus
    from approvals.services import approval_expire

    open_ = Approval.objects.filter(
        shard_id=shard_id,
        status__in=[
            ApprovalStatus.PENDING,
            ApprovalStatus.APPROVED,
            ApprovalStatus.APPROVED_STALE,
        ],
    )
    for approval in open_.select_for_update():
        approval_expire(audit=audit, approval=approval, by="shard.delete")


# --- deliveries, keys, auth ------------------------------------------------


def delivery_prune(*, now: datetime | None = None) -> int:
    cutoff = (now or timezone.now()) - timedelta(days=settings.ZEROLOCK_DELIVERY_RETENTION_DAYS)
    deleted, _ = Delivery.objects.older_than(cutoff).delete()
    return deleted


def _known_permissions(permissions: list[str]) -> list[str]:
    unknown = sorted(set(permissions) - set(ApiKeyPermission.values))
    if unknown:
        raise ApiError(400, "VALIDATION_ERROR", f"Unknown permissions: {', '.join(unknown)}")
    return sorted(set(permissions))


KEY_AUDITED_FIELDS = (
    "name",
    "permissions",
    "agent_ids",
    "shard_prefixes",
    "rate_limit",
    "expires_at",
)


def _key_state(key: ApiKey) -> dict[str, Any]:
    state = {field: getattr(key, field) for field in KEY_AUDITED_FIELDS}
    state["expires_at"] = key.expires_at.isoformat() if key.expires_at else None
    return state


def api_key_create(
    *,
    name: str,
    permissions: list[str],
    agent_ids: list[str] | None = None,
    shard_prefixes: list[str] | None = None,
    rate_limit: int | None = None,
    expires_at: datetime | None = None,
    created_by: str = "",
) -> tuple[ApiKey, str]:
    """Creates a key and returns it with the raw key, which is never stored."""
    permissions = _known_permissions(permissions)
    raw, prefix, hashed = generate_raw_key()
    with audited_transaction() as audit:
        key = ApiKey.objects.create(
            name=name,
            prefix=prefix,
            hashed_key=hashed,
            permissions=permissions,
            agent_ids=agent_ids or [],
            shard_prefixes=shard_prefixes or [],
            rate_limit=rate_limit,
            expires_at=expires_at,
        )
        audit.append(
            action=AuditAction.KEY_CREATE,
            agent_id=created_by,
            key_prefix=prefix,
            details=_key_state(key),
        )
    return key, raw


def api_key_update(*, key: ApiKey, changed_by: str, **changes: Any) -> ApiKey:
    """Changes a key's grants; the audit entry records before and after."""
    if "permissions" in changes:
        changes["permissions"] = _known_permissions(changes["permissions"])
    with audited_transaction() as audit:
        before = _key_state(ApiKey.objects.get(pk=key.pk))
        for field, value in changes.items():
            setattr(key, field, value)
        key.save()
        after = _key_state(key)
        diff = {f: {"from": before[f], "to": after[f]} for f in after if before[f] != after[f]}
        if diff:
            audit.append(
                action=AuditAction.KEY_CHANGE,
                agent_id=changed_by,
                key_prefix=key.prefix,
                details={"changes": diff},
            )
    return key


def api_key_revoke(*, key: ApiKey, revoked_by: str) -> ApiKey:
    with audited_transaction() as audit:
        if ApiKey.objects.filter(pk=key.pk, revoked=False).update(revoked=True):
            audit.append(action=AuditAction.KEY_REVOKE, agent_id=revoked_by, key_prefix=key.prefix)
    key.revoked = True
    return key


def audit_auth_failure(*, reason: str, key_prefix: str = "", path: str = "") -> None:
    """Written behind, in batches (never one write-lock turn per failure: a flood of
    bad keys must not slow honest commits)."""
    rejections.append(
        {
            "action": AuditAction.AUTH_FAILURE,
            "key_prefix": key_prefix[:16],
            "details": {"reason": reason, **({"path": path} if path else {})},
        }
    )
