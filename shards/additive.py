"""Additive shards (CRDT, pycrdt): a REST operation or a Yjs update merged into
the shard's Doc. Structurally separate from the OCC path: an additive write is
never compared against a version the writer read, so it is never stale; the
version it makes is the one after whatever the database holds under the lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from access.identity import Actor
from common import hotsql
from common.errors import ApiError, ErrorCode, ShardNotFound
from common.events import send_event_on_commit

from . import crdt, crdt_store, crdt_update
from .models import CrdtUpdate, Shard
from .rules import Additions, WriteRules, fence_parse, rules_precheck
from .schema_additive import additions_validate
from .writer import CommitResult, group_commit, version_write, write_transaction
from .writetx import WriteTx

Change = Callable[[Any, Any], tuple[bytes | None, Any]]


def additive_commit(*, actor: Actor, shard: Shard, body: dict[str, Any]) -> CommitResult:
    """A REST operation on an additive shard (a map patch, an array append, a
    text delta), in a group-commit batch."""
    rules = WriteRules(approval_id=body.get("approval_id"), versioned=False)
    rules_precheck(shard, actor, rules, expected_version=shard.version, value=None)
    op = crdt.parse_op(shard.crdt_kind, body)
    # What the schema says of each added item or key is checked here, outside the
    # write lock; only the whole-value keywords (maxItems, required, ...) under it.
    checked = additions_validate(shard.value_schema, shard.crdt_kind, crdt.additions(op))
    rules = WriteRules(
        approval_id=rules.approval_id,
        fence=fence_parse(body.get("fence")),
        schema=Additions(checked, shard.crdt_kind),
        versioned=False,
        details={"crdt_type": shard.crdt_type},
    )

    def change(doc: Any, value: Any) -> tuple[bytes | None, Any]:
        return crdt.apply_op(shard.crdt_kind, doc, value, op)

    result = group_commit.run(
        lambda tx: additive_apply_locked(
            tx=tx, actor=actor, shard=shard, change=change, op_json=op.as_json(), rules=rules
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
    rules = WriteRules(
        schema=Additions(False, shard.crdt_kind),
        versioned=False,
        details={"crdt_type": shard.crdt_type},
    )
    rules_precheck(shard, actor, rules, expected_version=shard.version, value=None)
    # Read before the write lock, in time proportional to the update: nothing of
    # an update that reaches past the shard's root ever touches its Doc.
    reach = crdt_update.update_check(shard.crdt_kind, update)

    def change(doc: Any, value: Any) -> tuple[bytes | None, Any]:
        return crdt.apply_update(shard.crdt_kind, doc, update, reach)

    with write_transaction() as tx:
        return additive_apply_locked(
            tx=tx, actor=actor, shard=shard, change=change, op_json=None, rules=rules, origin=origin
        )


def additive_apply_locked(
    *,
    tx: WriteTx,
    actor: Actor,
    shard: Shard,
    change: Change,
    op_json: dict[str, Any] | None,
    rules: WriteRules,
    origin: str = "",
) -> CommitResult | None:
    """The CRDT merge: one change applied to the shard's Doc under the write lock
    (the caller's write transaction), its update logged in that transaction,
    then pushed to Yjs clients. ``op_json`` None means a raw Yjs update."""
    shard_id = shard.id
    # Re-read under the write lock: the database is the only truth. The rules in
    # ``shard`` hold for its incarnation only: a shard deleted (and perhaps
    # re-created) since they were read is refused, never written with old rules.
    row = hotsql.select_one(
        Shard, ("version", "crdt_state_version"), id=shard_id, incarnation=shard.incarnation
    )
    if row is None:
        raise ShardNotFound(shard_id)
    loaded = tx.fresh_docs.pop(shard_id, None)  # an earlier write of this transaction's
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
    if op_json is None:
        op_json = crdt.yjs_op(update)
    columns: dict[str, Any] = {}
    if snapshot is not None:
        columns = {"crdt_state": snapshot, "crdt_state_version": version, "value": value}
    result = version_write(
        tx=tx,
        shard=shard,
        actor=actor,
        expected_version=row["version"],
        value=value,
        rules=rules,
        columns=columns,
        audit_value=op_json,
    )
    if result is None:  # cannot happen under the lock; refuse rather than guess
        raise ShardNotFound(shard_id)
    hotsql.insert(
        CrdtUpdate, {"shard_id": shard_id, "version": version, "update": update, "op": op_json}
    )
    send_event_on_commit("crdt_update", shard_id=shard_id, update=update, origin=origin)
    # Last: only a write that got this far leaves its Doc for the next one.
    tx.fresh_docs[shard_id] = crdt_store.Loaded(
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
    under the write lock (20-36 ms for 7.3 MB of small records, measured). A
    write that would take the count past the cap, or that is due to compact the
    log, encodes the Doc: the encoding becomes the snapshot if it fits (the log
    starts again from it, so updates that only replaced or deleted content free
    their room), and 413 SHARD_TOO_LARGE if it does not. So nothing past the cap
    is ever stored."""
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
            ErrorCode.SHARD_TOO_LARGE,
            f"Shard {shard_id!r} would hold {size} bytes (its Yjs document, encoded); "
            f"an additive shard holds at most {limit}.",
            shard_id=shard_id,
            limit_bytes=limit,
        )
