"""Per-process cache of additive shards' Docs, always checked against the database.

A cached Doc is used only when its version equals the version in the row just
read (under the write lock for commits), so another process's writes are never
missed: a mismatch rebuilds from the snapshot and the update log."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pycrdt

from . import crdt
from .models import CrdtUpdate, Shard

# Fold the update log into the snapshot every this many operations.
COMPACT_EVERY = 200


@dataclass(frozen=True)
class Loaded:
    version: int
    doc: pycrdt.Doc
    value: Any
    # The shard incarnation this Doc belongs to: a re-created shard reaching the
    # same version must not be served the deleted one's Doc.
    incarnation: Any
    # What the database holds of the Doc at ``version``: the snapshot and the
    # updates logged after it, in bytes; what ZEROLOCK_MAX_SHARD_BYTES caps
    # (services.stored_after), counted without encoding the Doc.
    stored_bytes: int


_cache: dict[str, Loaded] = {}
_lock = threading.Lock()


def load(shard_id: str, crdt_type: str, version: int, incarnation: Any) -> Loaded:
    """The shard's Doc and value at ``version`` (the version its row shows now)."""
    with _lock:
        cached = _cache.get(shard_id)
    if cached is not None and cached.version == version and cached.incarnation == incarnation:
        return cached
    loaded = read(shard_id, crdt_type, version)
    remember(shard_id, loaded)
    return loaded


def read(shard_id: str, crdt_type: str, version: int | None = None) -> Loaded:
    """Built from the database, never cached: a Doc no other thread holds.

    At ``version``, or at the row's current version when that is None or when a
    compaction has already folded ``version`` into the snapshot."""
    # Only a cache miss pays for the snapshot and the value (both grow with the shard).
    snapshot = (
        Shard.objects.filter(pk=shard_id)
        .values("crdt_state", "crdt_state_version", "value", "version", "incarnation")
        .get()
    )
    if version is None or version < snapshot["crdt_state_version"]:
        version = snapshot["version"]
    updates = list(
        CrdtUpdate.objects.filter(
            shard_id=shard_id, version__gt=snapshot["crdt_state_version"], version__lte=version
        )
        .order_by("version")
        .values_list("update", "op")
    )
    if len(updates) != version - snapshot["crdt_state_version"]:
        raise RuntimeError(f"update log of {shard_id} has a gap")
    logged = [bytes(u) for u, _ in updates]
    state = bytes(snapshot["crdt_state"] or b"")
    doc, _ = crdt.load(crdt_type, state, *logged)
    if any(crdt.YJS_OP in op for _, op in updates):
        # A Yjs client's update has no JSON form to replay: render the Doc.
        value = crdt.render(crdt_type, doc)
    else:
        value = snapshot["value"]
        for _, op in updates:
            value = crdt.json_apply(value, crdt.parse_op(crdt_type, op))
    stored = len(state) + sum(len(u) for u in logged)
    return Loaded(version, doc, value, snapshot["incarnation"], stored)


def remember(shard_id: str, loaded: Loaded) -> None:
    with _lock:
        current = _cache.get(shard_id)
        if (
            current is None
            or current.incarnation != loaded.incarnation
            or current.version < loaded.version
        ):
            _cache[shard_id] = loaded


def forget(shard_id: str) -> None:
    with _lock:
        _cache.pop(shard_id, None)
