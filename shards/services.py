"""Writes to shards: create, commit (decision shards, OCC), delete, and the
read that records its delivery. The rules of a write live in ``rules`` and are
applied by the version writer (``writer.version_write``); additive shards'
merges are in ``additive`` (re-exported here)."""

from __future__ import annotations

import dataclasses
import functools
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from access.identity import Actor
from audit.chain import audited_transaction
from audit.models import AuditAction
from audit.rejections import rejections
from common.applied import applied_marking
from common.errors import ApiError, ErrorCode, Invalid
from common.events import send_event_on_commit

from . import crdt, crdt_store
from .additive import additive_commit, additive_update_apply, shard_size_check
from .deliveries import recorder
from .hooks import hooks
from .models import Delivery, OwnerPolicy, Shard, ShardType
from .rules import WriteRules, conflict_told, rules_precheck, schema_checked, stale_error
from .selectors import shard_current_value, shard_get
from .value_schema import schema_check, value_validate
from .writer import CommitResult, conflict_record, group_commit, occ_write, write_transaction

__all__ = [
    "Actor",
    "CommitResult",
    "additive_commit",
    "additive_update_apply",
    "shard_commit",
    "shard_create",
    "shard_current_value",
    "shard_delete",
    "shard_get",
    "shard_read",
]


def shard_read(*, shard_id: str, reader: str) -> Shard:
    """Reads a shard and records the delivery (who saw which version)."""
    if any_write_sweep_due():  # a read never shows what an expired lease held
        with applied_marking(None), write_transaction():
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
            raise Invalid("Additive shards need crdt_type: map, array or text.")
        initial_value = crdt.initial_json(crdt_type, initial_value)
        crdt_state = crdt.new_state(crdt_type, initial_value)
        shard_size_check(shard_id, len(crdt_state))
    elif crdt_type is not None:
        raise Invalid("crdt_type is only for additive shards.")
    schema_check(value_schema)
    value_validate(value_schema, initial_value)
    with audited_transaction() as audit:
        if Shard.objects.filter(pk=shard_id).exists():
            raise ApiError(
                ErrorCode.SHARD_EXISTS, f"Shard {shard_id!r} already exists.", shard_id=shard_id
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
    check itself is against the database. The cheap refusals come before the
    write lock (the shard's settings, the schema on this value, a version already
    gone); the writer applies every rule again under it."""
    started = time.perf_counter()
    rules = WriteRules(approval_id=approval_id, read_set=read_set, fence=fence)
    rules_precheck(shard, actor, rules, expected_version=expected_version, value=new_value)
    rules = dataclasses.replace(rules, schema=schema_checked(shard, new_value))
    try:
        _stale_precheck(actor, shard, expected_version, new_value)
        outcome = group_commit.run(
            functools.partial(
                occ_write,
                actor=actor,
                shard=shard,
                expected_version=expected_version,
                value=new_value,
                rules=rules,
            )
        )
        if isinstance(outcome, ApiError):
            raise outcome
    except ApiError as refusal:
        if refusal.status == 409:
            conflict_record(shard_id=shard.id, started=started)
        raise
    return outcome


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
    rejection = stale_error(actor, expected_version, current)
    rejections.record(
        agent_id=actor.agent_id,
        key_prefix=actor.key_prefix,
        shard_id=shard_id,
        expected=expected_version,
        code=rejection.code,
    )
    conflict_told(actor, shard_id, current, new_value)
    raise rejection


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
