"""A shard's ``value_schema`` for additive writes (append, patch): the schema
split into what holds for each thing a write adds, checked before the write
lock, and what needs the merged value, checked under it.

Separate from ``shards.value_schema``, whose ``value_validate`` it uses for both
halves: this module is only about how a schema splits for the additive CRDT
types, which nothing else needs.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from .schema_keywords import VALIDATOR_CACHE_SIZE
from .value_schema import value_validate

# --- additive writes: what they add, checked before the write lock ---------------

# Keywords that say nothing about the value itself (kept on both halves, so that
# references resolve the same way).
_META = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$defs",
        "definitions",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
# Per CRDT type: keywords that hold for the whole value exactly when they hold
# for each thing a write adds (every item of an append, every key a patch sets),
# and the cheap keywords that need the whole value. A schema with any other
# keyword at its root (contains, prefixItems, a root $ref, anyOf, ...) is
# checked whole, under the lock, within the budget.
_PER_PART: dict[str, frozenset[str]] = {
    "array": frozenset({"type", "items"}),
    "map": frozenset(
        {"type", "properties", "patternProperties", "additionalProperties", "propertyNames"}
    ),
}
_WHOLE: dict[str, frozenset[str]] = {
    "array": frozenset({"type", "maxItems", "minItems", "uniqueItems"}),
    "map": frozenset({"type", "required", "maxProperties", "minProperties"}),
}


@dataclass(frozen=True)
class _Split:
    parts: Any  # checked on what the write adds, before the lock
    whole: Any  # checked on the merged value, under it


@functools.lru_cache(maxsize=VALIDATOR_CACHE_SIZE)
def _split(canonical: str, crdt_type: str) -> _Split | None:
    schema = json.loads(canonical)
    if crdt_type not in _PER_PART or not isinstance(schema, dict):
        return None
    per_part, whole = _PER_PART[crdt_type], _WHOLE[crdt_type]
    if not set(schema) <= per_part | whole | _META:
        return None
    if crdt_type == "array" and not isinstance(schema.get("items", True), dict | bool):
        return None  # items as a list (draft 4-7) is positional
    keep = {k: v for k, v in schema.items() if k in _META}
    return _Split(
        parts=keep | {k: v for k, v in schema.items() if k in per_part},
        whole=keep | {k: v for k, v in schema.items() if k in whole},
    )


def _split_of(schema: Any, crdt_type: str) -> _Split | None:
    if schema is None:
        return None
    return _split(json.dumps(schema, sort_keys=True, separators=(",", ":")), crdt_type)


def additions_validate(schema: Any, crdt_type: str, additions: Any) -> bool:
    """Checks what an additive write adds (an append's items, a patch's set keys
    as an object) against the part of the schema that holds item by item, before
    the write lock: that part is what costs, and it does not depend on what other
    writers add meanwhile. True when the schema splits so; the write must then
    still pass ``merged_validate(..., additions_checked=True)`` under the lock.
    False when it does not split: everything is checked under the lock."""
    split = _split_of(schema, crdt_type)
    if split is None:
        return False
    value_validate(split.parts, additions)
    return True


def merged_validate(schema: Any, crdt_type: str, value: Any, *, additions_checked: bool) -> None:
    """The additive shard's merged value, under the write lock: only the cheap
    whole-value keywords when its additions were checked before the lock."""
    split = _split_of(schema, crdt_type) if additions_checked else None
    value_validate(schema if split is None else split.whole, value)
