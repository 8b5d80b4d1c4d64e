"""Reads of shards, and the one "no such shard" error."""

from __future__ import annotations

from typing import Any

from common import hotsql
from common.errors import ApiError, ErrorCode

from . import crdt_store
from .models import Shard, ShardType


class ShardNotFound(ApiError):
    """404 SHARD_NOT_FOUND, the same everywhere a shard id names nothing."""

    def __init__(self, shard_id: str, *, where: str = "", **details: Any) -> None:
        message = f"{where}: no shard {shard_id!r}." if where else f"No shard {shard_id!r}."
        if where:
            details["at"] = where
        super().__init__(ErrorCode.SHARD_NOT_FOUND, message, shard_id=shard_id, **details)


def shard_get(shard_id: str, *, payload: bool = True) -> Shard:
    """The shard, or ShardNotFound. ``payload=False`` leaves out the value and
    CRDT state (rules and metadata only)."""
    # Every request reads a shard this way: one statement compiled once
    # (common.hotsql), not a queryset built per call.
    exclude = () if payload else Shard.PAYLOAD
    shard = hotsql.instance_by_pk(Shard, shard_id, exclude=exclude)
    if shard is None:
        raise ShardNotFound(shard_id)
    return shard


def shard_current_value(shard: Shard) -> Any:
    """A shard's value as of its row: additive shards replay their update log."""
    if shard.type != ShardType.ADDITIVE:
        return shard.value
    loaded = crdt_store.load(shard.id, shard.crdt_kind, shard.version, shard.incarnation)
    shard.version = loaded.version  # newer if a compaction overtook this read
    return loaded.value
