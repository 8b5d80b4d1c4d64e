"""Additive shards on pycrdt: one Doc per shard with a root named ``value``.

Storage is a snapshot on the shard row plus one ``CrdtUpdate`` row per applied
operation, written in the transaction that acknowledges it; every so many
updates the log is folded into the snapshot. The JSON value is kept in step from
the operations themselves, so what a client sent is what it reads back (pycrdt
would turn 1 into 1.0). Rewriting the whole Doc and value on every append made
an append cost grow with the shard (7 ms at 500 items, 27 ms at 2,000: measured).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import pycrdt
from django.conf import settings

from common.errors import ApiError, Invalid, MalformedUpdate, UnsupportedDiff
from common.inputs import is_json_integer

from . import crdt_update, yjs_binary
from .models import CrdtType

ROOT = "value"
_ROOT_TYPES: dict[str, Any] = {
    CrdtType.MAP: pycrdt.Map,
    CrdtType.ARRAY: pycrdt.Array,
    CrdtType.TEXT: pycrdt.Text,
}
_EMPTY: dict[str, Any] = {CrdtType.MAP: dict, CrdtType.ARRAY: list, CrdtType.TEXT: str}


@dataclass(frozen=True)
class AdditiveOp:
    kind: str  # "patch", "append" or "delta"
    payload: Any

    def as_json(self) -> dict[str, Any]:
        return {{"patch": "new_value"}.get(self.kind, self.kind): self.payload}


def additions(op: AdditiveOp) -> Any:
    """What an operation adds, as its own JSON value: an append's items, the keys a
    patch sets (as an object; deletions add nothing), None for a text delta."""
    if op.kind == "append":
        return op.payload
    if op.kind == "patch":
        return {key: item for key, item in op.payload.items() if item is not None}
    return None


def unsupported(message: str) -> ApiError:
    return UnsupportedDiff(message)


def initial_json(crdt_type: str, value: Any) -> Any:
    """Checks an additive shard's initial value; None means empty."""
    empty = _EMPTY[crdt_type]
    if value is None:
        return empty()
    if not isinstance(value, empty):
        raise Invalid(
            f"initial_value of a {crdt_type} shard must be {empty.__name__ if empty is not str else 'a string'}.",
        )
    return value


def parse_op(crdt_type: str, body: dict[str, Any]) -> AdditiveOp:
    """The commit body's intent for this shard type, or 400 UNSUPPORTED_DIFF."""
    intents = {k for k in ("new_value", "append", "delta") if k in body}
    intent_of: dict[str, str] = {
        CrdtType.MAP: "new_value",
        CrdtType.ARRAY: "append",
        CrdtType.TEXT: "delta",
    }
    expected = intent_of[crdt_type]
    if intents != {expected}:
        hints: dict[str, str] = {
            CrdtType.MAP: 'a patch of top-level keys: {"new_value": {"key": value, "gone": null}}',
            CrdtType.ARRAY: 'append intent: {"append": [item, ...]} (never a whole array)',
            CrdtType.TEXT: 'a Quill/Yjs delta: {"delta": [{"retain": 5}, {"insert": "abc"}, {"delete": 2}]}',
        }
        raise unsupported(f"A {crdt_type} shard takes {hints[crdt_type]}.")
    payload = body[expected]
    if crdt_type == CrdtType.MAP:
        if not isinstance(payload, dict) or not payload:
            raise unsupported(
                "new_value of a map shard must be a non-empty object of keys to set or null."
            )
        return AdditiveOp("patch", payload)
    if crdt_type == CrdtType.ARRAY:
        if not isinstance(payload, list) or not payload:
            raise unsupported("append must be a non-empty list of items.")
        return AdditiveOp("append", payload)
    if not isinstance(payload, list) or not payload:
        raise unsupported("delta must be a non-empty list of operations.")
    edits, after_retain = 0, True
    for op in payload:
        if not (isinstance(op, dict) and len(op) == 1):
            raise unsupported(
                f"Each delta operation has exactly one of retain/insert/delete: {op!r}."
            )
        ((name, arg),) = op.items()
        if name == "insert":
            if not isinstance(arg, str) or not arg:
                raise unsupported("insert takes a non-empty string.")
        elif name in ("retain", "delete"):
            if not is_json_integer(arg) or arg < 1:
                raise unsupported(f"{name} takes a positive integer.")
        else:
            raise unsupported(f"Unknown delta operation {name!r}.")
        if name != "retain" and after_retain:
            edits += 1
        after_retain = name == "retain"
    max_edits = settings.ZEROLOCK_MAX_DELTA_EDITS
    if edits > max_edits:
        # Each edit costs pycrdt a walk over the Text (see _apply_delta).
        raise UnsupportedDiff(
            f"This delta makes {edits} edits (runs of inserts and deletes between "
            f"retains); a delta makes at most {max_edits}: send it in parts, or "
            "replace a whole span as one edit.",
            max_edits=max_edits,
        )
    return AdditiveOp("delta", payload)


def new_state(crdt_type: str, value: Any) -> bytes:
    doc, root = load(crdt_type)
    if crdt_type == CrdtType.MAP:
        for key, item in value.items():
            root[key] = item
    elif crdt_type == CrdtType.ARRAY:
        _append(root, value)
    elif value:
        root.insert(0, value)
    return doc.get_update()


def load(crdt_type: str, *updates: bytes) -> tuple[pycrdt.Doc, Any]:
    """A Doc from a snapshot and the updates after it, with its root declared."""
    doc: pycrdt.Doc = pycrdt.Doc()
    for update in updates:
        doc.apply_update(update)
    doc[ROOT] = root = _ROOT_TYPES[crdt_type]()
    return doc, root


def apply_op(crdt_type: str, doc: pycrdt.Doc, value: Any, op: AdditiveOp) -> tuple[bytes, Any]:
    """Applies one operation to the Doc (in place) and to a copy of the JSON value.

    Returns the Doc update that the operation produced and the new value. Bounds
    are checked before the Doc is touched, so a bad op changes nothing."""
    root = doc[ROOT]
    before = doc.get_state()
    new_value = json_apply(value, op)  # raises on a bad delta before the Doc changes
    if op.kind == "patch":
        for key, item in op.payload.items():
            if item is None:
                if key in root:
                    del root[key]
            else:
                root[key] = item
    elif op.kind == "append":
        _append(root, op.payload)
    else:
        _apply_delta(root, value, op.payload)
    return doc.get_update(before), new_value


def apply_update(
    crdt_type: str, doc: pycrdt.Doc, update: bytes, reach: dict[int, int]
) -> tuple[bytes | None, Any]:
    """Merges a Yjs update from a CRDT client into the Doc (in place), ``reach``
    being what ``crdt_update.update_check`` found the update to hold.

    Returns what it changed in the Doc, as an update (None if nothing), and the new
    value, rendered from the Doc. Undecodable bytes raise 400 MALFORMED_UPDATE with
    the Doc untouched (pycrdt decodes the whole update before integrating any of it).
    An array shard is append-only, as over REST: an update that deletes items
    raises 400 UNSUPPORTED_DIFF, and the caller drops the Doc it was applied to
    (nothing is stored). The change is taken from the transaction itself, so a
    delete-only update (a map key removed, text cut) counts as a change. An
    update that leaves parts of itself pending, or makes the value nest deeper
    than ZEROLOCK_MAX_JSON_DEPTH, raises 400 too (the caller drops the Doc)."""
    changes: list[bytes] = []
    deletes: list[Any] = []
    root = doc[ROOT]
    on_doc = doc.observe(lambda event: changes.append(event.update))
    on_root = (
        root.observe(lambda event: deletes.extend(d for d in event.delta if "delete" in d))
        if crdt_type == CrdtType.ARRAY
        else None
    )
    try:
        doc.apply_update(update)
    except ValueError as exc:
        raise MalformedUpdate(f"Not a Yjs update: {exc}") from exc
    finally:
        doc.unobserve(on_doc)
        if on_root is not None:
            root.unobserve(on_root)
    if deletes:
        raise unsupported(
            "An array shard is append-only: this Yjs update deletes items "
            f"({sum(d['delete'] for d in deletes)})."
        )
    crdt_update.updates_ahead_check(reach, doc.get_state())
    changed = [u for u in changes if not is_empty_update(u)]
    if not changed:
        return None, None
    merged = changed[0] if len(changed) == 1 else pycrdt.merge_updates(*changed)
    return merged, render(crdt_type, doc, max_depth=settings.ZEROLOCK_MAX_JSON_DEPTH)


def is_empty_update(update: bytes) -> bool:
    # What a client with nothing new sends as sync step 2: no structs, no deletes.
    return update == EMPTY_UPDATE


EMPTY_UPDATE = b"\x00\x00"
YJS_OP = "yjs_update"


def yjs_op(update: bytes) -> dict[str, Any]:
    """How a raw Yjs update shows in history and the audit log."""
    return {YJS_OP: base64.b64encode(update).decode()}


def json_apply(value: Any, op: AdditiveOp) -> Any:
    """The operation on the plain JSON value (a new object; the old one is shared)."""
    if op.kind == "patch":
        value = dict(value)
        for key, item in op.payload.items():
            if item is None:
                value.pop(key, None)
            else:
                value[key] = item
        return value
    if op.kind == "append":
        return [*value, *op.payload]
    remaining = len(value)
    for step in op.payload:
        ((name, arg),) = step.items()
        if name in ("retain", "delete"):
            if arg > remaining:
                raise unsupported(f"{name} {arg} goes past the end of the text.")
            remaining -= arg
    # Pieces joined once: rebuilding the string at each step cost the text's
    # length per step (30,000 steps over 15,000 characters: seconds).
    pieces, cursor = [], 0
    for step in op.payload:
        ((name, arg),) = step.items()
        if name == "retain":
            pieces.append(value[cursor : cursor + arg])
            cursor += arg
        elif name == "insert":
            pieces.append(arg)
        else:
            cursor += arg
    pieces.append(value[cursor:])
    return "".join(pieces)


def _append(array: pycrdt.Array, items: list[Any]) -> None:
    """Appends ``items`` in order, each in a transaction of its own.

    pycrdt's ``extend`` inserts item by item inside one transaction, where yrs's
    time and memory grow with the square of the count: 10,000 items took 2.3 s
    and 2.4 GB, and a server appending 30,000 (a 60 KB body) passed 1 GB within
    3 s (11 GB and 56 s reported). Appended one per transaction (10,000: 0.06 s,
    30,000: 0.3 s), each item joins the run before it as its transaction ends,
    so the Doc, the operation's update and the Doc's encoding come out byte for
    byte as ``extend`` makes them (tests/shards/test_crdt_ops.py)."""
    for item in items:
        array.append(item)


# Edits applied in order within a chunk, chunks from the last to the first; see
# _apply_delta. 256 was the fastest of 1-100,000 on every shape measured.
_DELTA_CHUNK = 256


def _apply_delta(text: pycrdt.Text, value: str, delta: list[dict[str, Any]]) -> None:
    """Applies an already-checked delta to the Text, ``value`` being its text before.

    pycrdt's Text has no cursor: an insert or delete at a (UTF-8 byte) index walks
    the Text's items from its start, and splitting an item costs the distance
    from the item's start to the split. Applied in order, each edit walks past
    the items every earlier edit made (quadratic in the edits: 10,000 edits
    took 2 s); applied from the last to the first, each edit splits the long
    run before it at its far end (quadratic in the text: 10,000 edits over
    210,000 characters took 2.2 s). So the delta becomes edits at byte offsets
    of the text before it, applied in chunks of ``_DELTA_CHUNK``: chunks from
    the last to the first, edits in order within a chunk. An edit then walks
    past at most one chunk's new items and splits short runs (0.2 s for both
    shapes). Consecutive inserts and deletes between two retains are one edit:
    the inserted text goes in before the deleted characters."""
    edits: list[
        tuple[int, str, int]
    ] = []  # (byte offset before the delta, inserted, bytes deleted)
    inserted: list[str] = []
    cursor = at = start = deleted = 0
    for step in (*delta, {"retain": 0}):  # a retain ends each run of edits
        ((name, arg),) = step.items()
        if name == "retain":
            if inserted or deleted:
                edits.append((start, "".join(inserted), deleted))
                inserted, deleted = [], 0
            at += _utf8_len(value[cursor : cursor + arg])
            cursor += arg
            start = at
        elif name == "insert":
            inserted.append(arg)
        else:
            size = _utf8_len(value[cursor : cursor + arg])
            deleted += size
            at += size
            cursor += arg
    for first in range((len(edits) - 1) // _DELTA_CHUNK * _DELTA_CHUNK, -1, -_DELTA_CHUNK):
        shift = 0  # bytes this chunk's earlier edits added before the next one
        for offset, chunk, size in edits[first : first + _DELTA_CHUNK]:
            at = offset + shift
            if chunk:
                text.insert(at, chunk)
                at += _utf8_len(chunk)
            if size:
                del text[at : at + size]
            shift += _utf8_len(chunk) - size


def _utf8_len(text: str) -> int:
    return len(text.encode())


def state_json(crdt_type: str, *updates: bytes) -> Any:
    doc, _ = load(crdt_type, *updates)
    return render(crdt_type, doc)


def render(crdt_type: str, doc: pycrdt.Doc, *, max_depth: int | None = None) -> Any:
    """The Doc as JSON, integral floats back to ints (for what Yjs clients wrote).

    From pycrdt's JSON encoding of the root (``str``): ``to_py`` reads an
    Array item by item by index, each read walking the Array from its start
    (20,000 items written by two alternating clients: 3.1 s, measured). Then
    one pass without recursion, which also refuses (when ``max_depth`` is
    given: the write path) a value nesting deeper than that, the root being one
    level, as REST counts a body's."""
    root = doc[ROOT]
    if crdt_type == CrdtType.TEXT:
        return str(root)
    value = json.loads(str(root))
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if max_depth is not None and depth > max_depth:
            raise yjs_binary.too_deep(max_depth)
        for key, item in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(item, float) and item.is_integer():
                node[key] = int(item)
            elif isinstance(item, (dict, list)):
                stack.append((item, depth + 1))
    return value
