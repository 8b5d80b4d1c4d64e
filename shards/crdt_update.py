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
- values nested deeper than ``ZEROLOCK_MAX_JSON_DEPTH`` (``VALIDATION_ERROR``),
  counted as the shard's JSON value nests them (its root is one level): JSON
  and lib0 values inside an item, and shared types nested in one another. yrs
  decodes, renders and deletes them recursively: 50,000 levels of values
  (100 KB), or 60,000 nested Y.Maps deleted in the same update (520 KB),
  killed the process with a segmentation fault. A type's level is found by
  following its parent (named, or by id) or its origin (an item beside it)
  through the update's own items; one whose parent the update does not hold is
  counted from the root's children, and ``shards.crdt.render`` measures the
  whole value once the update is in (``updates_ahead_check`` makes sure
  nothing waits in the Doc to be integrated later);
- strings holding NUL or not valid UTF-8, and numbers that are not finite
  (``VALIDATION_ERROR``): REST's rules (``common.inputs``), since PostgreSQL's
  jsonb refuses such values when a compaction stores the JSON value;
- bytes that end inside a part, and items that refer to each other in a circle
  (``MALFORMED_UPDATE``).

Why this is enough for the roots: an item names its parent only when it has
neither a left nor a right origin; otherwise it takes its origin's parent. So
every item in the Doc descends, through origins and nested types, from one that
named a root, and each of those was checked on its way in. The delete set that
follows the items is not read: deletions add nothing.

The bytes themselves (lib0's varints, buffers and "any" values) are read by
``shards.yjs_binary``.
"""

from __future__ import annotations

from bisect import bisect_right

from django.conf import settings

from common.errors import MalformedUpdate
from common.inputs import NotJson, json_body_loads, json_depth_check

from .models import CrdtType
from .yjs_binary import _Reader, _truncated, too_deep, unsupported_update

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

_ORIGIN, _RIGHT_ORIGIN, _PARENT_SUB = 0x80, 0x40, 0x20

# How an item names where it sits: under the root, in a type (by the type's id),
# or beside another item (by that item's id), whose parent it shares.
_IN_ROOT, _IN_TYPE, _BESIDE = 0, 1, 2


def update_check(crdt_type: str, update: bytes) -> dict[int, int]:
    """Refuses an update that reaches past the shard's root or that its JSON
    value could not show (see the module docstring). Returns how far it reaches
    for each client (the clock after its last struct), for
    ``updates_ahead_check``."""
    max_depth = settings.ZEROLOCK_MAX_JSON_DEPTH
    reader = _Reader(update)
    reach: dict[int, int] = {}
    items = _Items()
    for _ in range(reader.uint()):  # clients
        structs = reader.uint()
        client = reader.uint()
        clock = reader.uint()
        for _ in range(structs):
            if reader.pos >= reader.end:
                raise _truncated()
            info = update[reader.pos]
            reader.pos += 1
            kind = info & 0x1F
            if kind in (_GC, _SKIP):
                clock += reader.uint()  # length
                continue
            clock += _item_check(reader, crdt_type, info, kind, max_depth, items, client, clock)
        reach[client] = max(reach.get(client, 0), clock)
    items.nesting_check(max_depth)
    return reach


class _Items:
    """The update's items as far as nesting goes, to follow parents and origins
    once all are read (an item may name one that comes later in the update)."""

    __slots__ = ("clients", "lengths", "refs", "depths", "is_type", "types", "deepest")

    def __init__(self) -> None:
        self.clients: dict[int, tuple[list[int], list[int]]] = {}  # starts, indexes
        self.lengths: list[int] = []
        self.refs: list[tuple[int, int, int]] = []  # how, client, clock
        self.depths: list[int] = []  # levels the content nests (a type: 1)
        self.is_type: list[bool] = []
        self.types = 0
        self.deepest = 0

    def add(
        self,
        client: int,
        clock: int,
        length: int,
        ref: tuple[int, int, int],
        depth: int,
        is_type: bool,
    ) -> None:
        starts, indexes = self.clients.setdefault(client, ([], []))
        starts.append(clock)
        indexes.append(len(self.lengths))
        self.lengths.append(length)
        self.refs.append(ref)
        self.depths.append(depth)
        self.is_type.append(is_type)
        self.types += is_type
        self.deepest = max(self.deepest, depth)

    def find(self, client: int, clock: int) -> int | None:
        found = self.clients.get(client)
        if found is None:
            return None
        starts, indexes = found
        at = bisect_right(starts, clock) - 1
        if at < 0 or clock >= starts[at] + self.lengths[indexes[at]]:
            return None
        return indexes[at]

    def nesting_check(self, max_depth: int) -> None:
        """Each item's level (the root's children are at 1, a type's children one
        deeper than the type) plus what its content nests is at most
        ``max_depth``. Nothing to follow when the update holds too few types to
        nest that deep, as in nearly every real update."""
        if 1 + self.types + self.deepest <= max_depth:
            return
        for starts, indexes in self.clients.values():
            if starts != sorted(starts):  # a client listed twice
                order = sorted(range(len(starts)), key=starts.__getitem__)
                starts[:] = [starts[i] for i in order]
                indexes[:] = [indexes[i] for i in order]
        levels = [0] * len(self.lengths)  # 0: not known yet, -1: being followed
        for first in range(len(levels)):
            if levels[first]:
                continue
            chain: list[tuple[int, int]] = []  # (item, levels below what it names)
            item, base = first, 0
            while True:
                levels[item] = -1
                how, client, clock = self.refs[item]
                named = None if how == _IN_ROOT else self.find(client, clock)
                if named is not None and how == _IN_TYPE and not self.is_type[named]:
                    named = None  # not a type in this update: counted from the root
                step = 1 if how == _IN_TYPE else 0
                chain.append((item, step))
                if named is None:
                    base = 1 - step  # the root's children sit at level 1
                    break
                if levels[named] == -1:
                    raise MalformedUpdate(
                        "Not a Yjs update: its items name each other as parent or origin "
                        "in a circle.",
                    )
                if levels[named]:
                    base = levels[named]
                    break
                item = named
            level = base
            for item, step in reversed(chain):
                level += step
                levels[item] = level
                if level + self.depths[item] > max_depth:
                    raise too_deep(max_depth)


def _item_check(
    reader: _Reader,
    crdt_type: str,
    info: int,
    kind: int,
    max_depth: int,
    items: _Items,
    client: int,
    clock: int,
) -> int:
    """Reads and checks one item; returns its length in clocks."""
    ref = (_IN_ROOT, 0, 0)
    if info & _ORIGIN:
        ref = (_BESIDE, reader.uint(), reader.uint())
    if info & _RIGHT_ORIGIN:
        right = (_BESIDE, reader.uint(), reader.uint())
        if not info & _ORIGIN:
            ref = right
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
            ref = (_IN_TYPE, reader.uint(), reader.uint())
        if keyed:
            reader.string()  # the key
    if crdt_type == CrdtType.TEXT and kind not in _TEXT_CONTENT:
        raise unsupported_update(
            "A text shard holds text only: this update carries "
            f"{_NO_JSON_FORM.get(kind) or _kind_name(kind)}."
        )
    if kind in _NO_JSON_FORM:
        raise unsupported_update(
            f"This update carries {_NO_JSON_FORM[kind]}, which the shard's JSON value cannot show."
        )
    depth = 0
    if kind == _DELETED:
        length = reader.uint()
    elif kind == _JSON:
        length = reader.uint()
        for _ in range(length):
            raw = reader.buffer()
            if raw == b"undefined":  # how Yjs writes undefined in JSON content
                continue
            depth = max(depth, json_depth_check(raw, max_depth - 1))
            try:
                json_body_loads(raw)  # REST's rules for strings and numbers
            except NotJson as exc:
                raise MalformedUpdate(f"Not a Yjs update: {exc}") from None
    elif kind == _STRING:
        text = reader.string()
        # Clocks count UTF-16 code units, as Yjs does.
        length = len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2
    elif kind == _TYPE:
        type_ref = reader.uint()
        if type_ref not in _TYPE_NAMES:
            raise unsupported_update(
                f"This update creates a shared type (type ref {type_ref}) that the shard's JSON "
                "value cannot show: only Y.Map, Y.Array and Y.Text nest."
            )
        length = depth = 1
    elif kind == _ANY:
        length = reader.uint()
        for _ in range(length):
            depth = max(depth, reader.skip_any(1, max_depth))
    else:
        raise MalformedUpdate(f"Not a Yjs update: unknown content kind {kind}.")
    items.add(client, clock, length, ref, depth, kind == _TYPE)
    return length


def updates_ahead_check(reach: dict[int, int], state: bytes) -> None:
    """After the update went into the Doc (whose state vector is ``state``):
    refuses it if some of it is still waiting, pending on clocks the Doc lacks.

    yrs keeps such parts and integrates them once what they wait for arrives;
    parts checked update by update could then join into one chain no check has
    seen whole (60 Y.Maps per update, held back, became 660 levels at once).
    A client that syncs first (sync step 1) never sends them."""
    reader = _Reader(state)
    known = {}
    for _ in range(reader.uint()):
        client = reader.uint()
        known[client] = reader.uint()
    for client, end in reach.items():
        if known.get(client, 0) < end:
            raise unsupported_update(
                f"This update builds on changes the shard does not have (client {client} "
                f"from clock {known.get(client, 0)}): sync first and send what it lacks.",
                client=client,
            )


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
