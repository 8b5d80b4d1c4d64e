"""What a Yjs client's update holds, read from its bytes before any Doc sees it.

pycrdt integrates whatever an update names, and has no reader for an update's
parts. Left to it, an update could create a root beside ``value`` (a 2 MB Map
under ``other`` was stored past a ``maxLength: 10`` schema, never shown by REST,
sent to every Yjs client), or hold content that the shard's JSON value cannot
show: binary, embeds and formatting attributes, sub-documents, XML and weak
links. ``update_check`` walks the update once (Yjs update format v1, as the sync
protocol carries it), in time proportional to the update and never to the
shard, and refuses:

- an item whose parent is a root other than ``value`` (``UNSUPPORTED_UPDATE``);
- content with no JSON form, and a direct child of ``value`` that the root does
  not show (a Map's items are keyed, an Array's and a Text's are not; a Text
  holds strings only) (``UNSUPPORTED_UPDATE``);
- values nested deeper than ``ZEROLOCK_MAX_JSON_DEPTH`` (``VALIDATION_ERROR``):
  yrs decodes and renders them recursively, and 50,000 levels (100 KB) killed
  the process with a segmentation fault;
- bytes that end inside a part (``MALFORMED_UPDATE``).

Why this is enough for the roots: an item names its parent only when it has
neither a left nor a right origin; otherwise it takes its origin's parent. So
every item in the Doc descends, through origins and nested types, from one that
named a root, and each of those was checked on its way in. The delete set that
follows the items is not read: deletions add nothing.
"""

from __future__ import annotations

from django.conf import settings

from common.errors import ApiError
from common.inputs import json_depth_check

from .models import CrdtType

ROOT_NAME = b"value"

# Content kinds (the low five bits of an item's info byte).
_GC, _DELETED, _JSON, _BINARY, _STRING, _EMBED, _FORMAT, _TYPE, _ANY, _DOC, _SKIP, _MOVE = range(12)
_NO_JSON_FORM = {
    _BINARY: "binary content",
    _EMBED: "an embed",
    _FORMAT: "a formatting attribute",
    _DOC: "a sub-document",
    _MOVE: "a move",
}
# Shared types a value can show: Array, Map and Text (yrs type refs 0-2); the
# XML types, weak links and undefined types have no JSON form.
_TYPE_NAMES = {0: "Y.Array", 1: "Y.Map", 2: "Y.Text"}
# What a Text shard's Doc may hold: its text, and what deleting it leaves.
_TEXT_CONTENT = {_DELETED, _STRING}

# lib0 "any" tags.
_ANY_FIXED = {127: 0, 126: 0, 121: 0, 120: 0, 124: 4, 123: 8, 122: 8}
_ANY_VARINT, _ANY_STRING, _ANY_OBJECT, _ANY_ARRAY, _ANY_BYTES = 125, 119, 118, 117, 116

_ORIGIN, _RIGHT_ORIGIN, _PARENT_SUB = 0x80, 0x40, 0x20


def unsupported_update(message: str, **details: object) -> ApiError:
    return ApiError(400, "UNSUPPORTED_UPDATE", message, **details)


def _truncated() -> ApiError:
    return ApiError(400, "MALFORMED_UPDATE", "Not a Yjs update: it ends inside a part.")


class _Reader:
    """lib0's encoding, read forward; every read consumes at least one byte, so
    no count read from the update can make a loop outlast the update."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.end = len(data)

    def uint(self) -> int:
        pos = self.pos
        if pos < self.end and self.data[pos] < 0x80:  # most numbers fit in one byte
            self.pos = pos + 1
            return self.data[pos]
        return self._long_uint()

    def _long_uint(self) -> int:
        data, pos, end = self.data, self.pos, self.end
        value = shift = 0
        while True:
            if pos >= end or shift > 63:
                raise _truncated()
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return value
            shift += 7

    def skip(self, length: int) -> None:
        if self.pos + length > self.end:
            raise _truncated()
        self.pos += length

    def buffer(self) -> bytes:
        length = self.uint()
        start = self.pos
        self.skip(length)
        return self.data[start : self.pos]

    def skip_buffer(self) -> None:
        self.skip(self.uint())

    def skip_varint(self) -> None:
        data, pos, end = self.data, self.pos, self.end
        while True:
            if pos >= end:
                raise _truncated()
            pos += 1
            if data[pos - 1] < 0x80:
                self.pos = pos
                return

    def skip_any(self, depth: int, max_depth: int) -> None:
        if self.pos >= self.end:
            raise _truncated()
        tag = self.data[self.pos]
        self.pos += 1
        fixed = _ANY_FIXED.get(tag)
        if fixed is not None:
            self.skip(fixed)
        elif tag == _ANY_VARINT:
            self.skip_varint()
        elif tag == _ANY_STRING:
            self.skip_buffer()
        elif tag == _ANY_BYTES:  # pycrdt stores Python bytes so; JSON has no form for them
            raise unsupported_update(
                "This update carries binary content, which the shard's JSON value cannot show."
            )
        elif tag in (_ANY_OBJECT, _ANY_ARRAY):
            if depth >= max_depth:
                raise _too_deep(max_depth)
            for _ in range(self.uint()):
                if tag == _ANY_OBJECT:
                    self.skip_buffer()  # the key
                self.skip_any(depth + 1, max_depth)
        else:
            raise ApiError(400, "MALFORMED_UPDATE", f"Not a Yjs update: unknown value tag {tag}.")


def _too_deep(max_depth: int) -> ApiError:
    return ApiError(
        400,
        "VALIDATION_ERROR",
        f"A value in the update is nested too deep: at most {max_depth} levels.",
        max_depth=max_depth,
    )


def update_check(crdt_type: str, update: bytes) -> None:
    """Refuses an update that reaches past the shard's root or that its JSON
    value could not show (see the module docstring); returns None otherwise."""
    max_depth = settings.ZEROLOCK_MAX_JSON_DEPTH
    reader = _Reader(update)
    for _ in range(reader.uint()):  # clients
        structs = reader.uint()
        reader.uint()  # client id
        reader.uint()  # first clock
        for _ in range(structs):
            if reader.pos >= reader.end:
                raise _truncated()
            info = update[reader.pos]
            reader.pos += 1
            kind = info & 0x1F
            if kind in (_GC, _SKIP):
                reader.uint()  # length
                continue
            _item_check(reader, crdt_type, info, kind, max_depth)


def _item_check(reader: _Reader, crdt_type: str, info: int, kind: int, max_depth: int) -> None:
    if info & _ORIGIN:
        reader.uint()
        reader.uint()
    if info & _RIGHT_ORIGIN:
        reader.uint()
        reader.uint()
    if not info & (_ORIGIN | _RIGHT_ORIGIN):
        keyed = bool(info & _PARENT_SUB)
        if reader.uint() == 1:  # the parent is a root, named
            name = reader.buffer()
            if name != ROOT_NAME:
                shown = name.decode("utf-8", "replace")[:64]
                raise unsupported_update(
                    f"This update writes to a root named {shown!r}: a shard's document has "
                    "one root, named 'value'.",
                    root=shown,
                )
            _root_child_check(crdt_type, keyed, kind)
        else:  # the parent is a nested type, by its id
            reader.uint()
            reader.uint()
        if keyed:
            reader.skip_buffer()
    if crdt_type == CrdtType.TEXT and kind not in _TEXT_CONTENT:
        raise unsupported_update(
            "A text shard holds text only: this update carries "
            f"{_NO_JSON_FORM.get(kind) or _kind_name(kind)}."
        )
    if kind in _NO_JSON_FORM:
        raise unsupported_update(
            f"This update carries {_NO_JSON_FORM[kind]}, which the shard's JSON value cannot show."
        )
    if kind == _DELETED:
        reader.uint()
    elif kind == _JSON:
        for _ in range(reader.uint()):
            json_depth_check(reader.buffer(), max_depth)
    elif kind == _STRING:
        reader.skip_buffer()
    elif kind == _TYPE:
        type_ref = reader.uint()
        if type_ref not in _TYPE_NAMES:
            raise unsupported_update(
                f"This update creates a shared type (type ref {type_ref}) that the shard's JSON "
                "value cannot show: only Y.Map, Y.Array and Y.Text nest."
            )
    elif kind == _ANY:
        for _ in range(reader.uint()):
            reader.skip_any(1, max_depth)
    else:
        raise ApiError(400, "MALFORMED_UPDATE", f"Not a Yjs update: unknown content kind {kind}.")


def _root_child_check(crdt_type: str, keyed: bool, kind: int) -> None:
    """A Map shows its keyed items only, an Array and a Text their unkeyed ones:
    anything else directly under ``value`` would be stored and sent, never shown."""
    if keyed != (crdt_type == CrdtType.MAP):
        raise unsupported_update(
            f"This update puts {'a keyed' if keyed else 'an unkeyed'} item directly under "
            f"the {crdt_type} root, where the shard's value would not show it."
        )
    if crdt_type != CrdtType.TEXT and kind == _STRING:
        raise unsupported_update(
            f"This update puts text directly under the {crdt_type} root; values go in as JSON."
        )


def _kind_name(kind: int) -> str:
    return {_JSON: "JSON values", _TYPE: "a shared type", _ANY: "JSON values"}.get(
        kind, f"content kind {kind}"
    )
