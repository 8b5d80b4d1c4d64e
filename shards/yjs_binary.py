"""lib0's binary encoding, as Yjs writes an update or a state vector: a reader
that walks it forward, and the refusals it raises on the way.

Separate from ``shards.crdt_update``, which uses it to read an update's
structs and items and to check what they hold: this module knows the bytes
(varints, buffers, lib0 "any" values), that one what a shard may be sent.
"""

from __future__ import annotations

import struct

from common.errors import ApiError, ErrorCode, Invalid, MalformedUpdate
from common.inputs import finite_check, utf8_string_check

# lib0 "any" tags.
_ANY_FIXED = {127: 0, 126: 0, 121: 0, 120: 0, 124: 4, 123: 8, 122: 8}
_ANY_VARINT, _ANY_STRING, _ANY_OBJECT, _ANY_ARRAY, _ANY_BYTES = 125, 119, 118, 117, 116

_ANY_FLOAT32, _ANY_FLOAT64 = 124, 123


def unsupported_update(message: str, **details: object) -> ApiError:
    return ApiError(ErrorCode.UNSUPPORTED_UPDATE, message, **details)


def _truncated() -> ApiError:
    return MalformedUpdate("Not a Yjs update: it ends inside a part.")


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

    def string(self) -> str:
        return utf8_string_check(self.buffer())

    def skip_any(self, depth: int, max_depth: int) -> int:
        """Reads one lib0 value whose containers start at ``depth``; returns how
        many levels it nests (0 for a scalar)."""
        if self.pos >= self.end:
            raise _truncated()
        tag = self.data[self.pos]
        self.pos += 1
        fixed = _ANY_FIXED.get(tag)
        if fixed is not None:
            start = self.pos
            self.skip(fixed)
            if tag in (_ANY_FLOAT64, _ANY_FLOAT32):  # lib0 writes them big-endian
                (number,) = struct.unpack(
                    ">d" if tag == _ANY_FLOAT64 else ">f", self.data[start : self.pos]
                )
                finite_check(number, repr(number))
        elif tag == _ANY_VARINT:
            self.skip_varint()
        elif tag == _ANY_STRING:
            self.string()
        elif tag == _ANY_BYTES:  # pycrdt stores Python bytes so; JSON has no form for them
            raise unsupported_update(
                "This update carries binary content, which the shard's JSON value cannot show."
            )
        elif tag in (_ANY_OBJECT, _ANY_ARRAY):
            if depth >= max_depth:
                raise too_deep(max_depth)
            inner = 0
            for _ in range(self.uint()):
                if tag == _ANY_OBJECT:
                    self.string()  # the key
                inner = max(inner, self.skip_any(depth + 1, max_depth))
            return inner + 1
        else:
            raise MalformedUpdate(f"Not a Yjs update: unknown value tag {tag}.")
        return 0


def too_deep(max_depth: int) -> ApiError:
    return Invalid(
        f"A value in the update is nested too deep: the shard's value nests at most "
        f"{max_depth} levels.",
        max_depth=max_depth,
    )
