"""Reads of shards, and the one "no such shard" error."""

from __future__ import annotations

from typing import Any

from common import hotsql
from common.errors import ShardNotFound

from . import crdt_store
from .models import Shard, ShardType


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
