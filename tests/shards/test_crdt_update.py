"""Reading a Yjs client's update before any Doc sees it (shards/crdt_update.py):
real pycrdt updates, no database."""

from __future__ import annotations

import random
import subprocess
import sys

import pycrdt
import pytest

from common.errors import ApiError
from shards.crdt_update import update_check

ROOTS = {"map": pycrdt.Map, "array": pycrdt.Array, "text": pycrdt.Text}


def an_update(crdt_type: str, edit) -> bytes:
    doc = pycrdt.Doc()
    edit(doc, doc.get("value", type=ROOTS[crdt_type]))
    return doc.get_update()


def refused(crdt_type: str, update: bytes) -> ApiError:
    with pytest.raises(ApiError) as refusal:
        update_check(crdt_type, update)
    return refusal.value


def _json(rnd: random.Random, depth: int = 0):
    if depth < 3 and rnd.random() < 0.3:
        return {f"k{i}": _json(rnd, depth + 1) for i in range(rnd.randint(0, 3))}
    if depth < 3 and rnd.random() < 0.3:
        return [_json(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    return rnd.choice([1, -7, 2.5, 2**40, "s" * rnd.randint(0, 9), None, True, False])


def _edit(rnd: random.Random, crdt_type: str, root) -> None:
    roll = rnd.random()
    if crdt_type == "map":
        if roll < 0.5:
            root[f"k{rnd.randint(0, 5)}"] = _json(rnd)
        elif roll < 0.7:
            root[f"n{rnd.randint(0, 2)}"] = pycrdt.Map({"a": _json(rnd)})
        elif roll < 0.8:
            root[f"t{rnd.randint(0, 2)}"] = pycrdt.Text("nested")
        elif len(root):
            del root[rnd.choice(list(root.keys()))]
    elif crdt_type == "array":
        if roll < 0.6 or not len(root):
            root.insert(rnd.randint(0, len(root)), _json(rnd))
        elif roll < 0.8:
            root.append(pycrdt.Array([1, pycrdt.Map({"x": 1})]))
        else:
            del root[rnd.randrange(len(root))]
    else:
        size = len(str(root))
        if roll < 0.7 or not size:
            root.insert(rnd.randint(0, size), "ab" * rnd.randint(1, 3))
        else:
            start = rnd.randrange(size)
            del root[start : min(size, start + rnd.randint(1, 4))]


@pytest.mark.parametrize("crdt_type", ["map", "array", "text"])
def test_every_update_real_clients_make_of_their_own_root_passes(crdt_type):
    """Three clients edit, delete, nest and sync each other; every update they
    exchange, every full state and their merge goes through untouched."""
    rnd = random.Random(crdt_type)
    docs = [pycrdt.Doc() for _ in range(3)]
    roots = [doc.get("value", type=ROOTS[crdt_type]) for doc in docs]
    checked = 0
    for _ in range(300):
        n = rnd.randrange(3)
        before = docs[n].get_state()
        _edit(rnd, crdt_type, roots[n])
        update_check(crdt_type, docs[n].get_update(before))
        other = docs[rnd.randrange(3)]
        catch_up = docs[n].get_update(other.get_state())
        update_check(crdt_type, catch_up)
        other.apply_update(catch_up)
        checked += 2
    for doc in docs:
        update_check(crdt_type, doc.get_update())
    update_check(crdt_type, pycrdt.merge_updates(*(doc.get_update() for doc in docs)))
    assert checked == 600


def test_an_update_that_writes_to_another_root_is_refused_and_names_it():
    update = an_update("map", lambda doc, root: doc.get("other", type=pycrdt.Map).update({"x": 1}))
    error = refused("map", update)
    assert (error.status, error.code, error.details["root"]) == (400, "UNSUPPORTED_UPDATE", "other")

    # Also mixed in with a legitimate edit of `value`, and in a text shard.
    def both(doc, root):
        root["fine"] = 1
        doc.get("notes", type=pycrdt.Text).insert(0, "hidden")

    assert refused("map", an_update("map", both)).details["root"] == "notes"
    text = an_update("text", lambda doc, root: doc.get("x", type=pycrdt.Array).append(1))
    assert refused("text", text).details["root"] == "x"


def _map(doc):
    return doc.get("value", type=pycrdt.Map)


def _text(doc, text="ab"):
    root = doc.get("value", type=pycrdt.Text)
    root.insert(0, text)
    return root


@pytest.mark.parametrize(
    "crdt_type, edit, says",
    [
        ("map", lambda doc: _map(doc).__setitem__("b", b"\x00\x01"), "binary"),
        ("map", lambda doc: _map(doc).__setitem__("d", pycrdt.Doc()), "sub-document"),
        ("map", lambda doc: _map(doc).__setitem__("x", pycrdt.XmlFragment()), "shared type"),
        ("text", lambda doc: _text(doc).insert_embed(1, {"img": 1}), "embed"),
        ("text", lambda doc: _text(doc).format(0, 1, {"b": 1}), "formatting"),
        # Items the root would not show, so the JSON value would never carry them.
        ("text", lambda doc: doc.get("value", type=pycrdt.Array).append(1), "text only"),
        ("map", lambda doc: doc.get("value", type=pycrdt.Array).append(1), "unkeyed"),
        ("map", lambda doc: _text(doc, "x"), "unkeyed"),
        ("array", lambda doc: _map(doc).update({"k": 1}), "keyed"),
    ],
)
def test_content_the_shards_json_value_cannot_show_is_refused(crdt_type, edit, says):
    doc = pycrdt.Doc()  # its root's type may differ from the shard's: a client's choice
    edit(doc)
    error = refused(crdt_type, doc.get_update())
    assert error.code == "UNSUPPORTED_UPDATE"
    assert says in error.message


def _deep_update(depth: int) -> bytes:
    """A Map entry under `value` holding an array nested ``depth`` levels (lib0 any)."""
    return (
        b"\x01\x01\x05\x00"  # one client (5), one struct, from clock 0
        + bytes([0x20 | 8])  # an item with a key, content "any", parent named
        + b"\x01\x05value\x01k\x01"
        + b"\x75\x01" * depth  # [[[[...
        + b"\x7e"  # null
        + b"\x00"  # no deletions
    )


def test_values_nested_past_the_json_depth_limit_are_refused_before_pycrdt_sees_them(settings):
    settings.ZEROLOCK_MAX_JSON_DEPTH = 64
    update_check("map", _deep_update(63))
    error = refused("map", _deep_update(64))
    assert (error.code, error.details["max_depth"]) == ("VALIDATION_ERROR", 64)
    assert refused("map", _deep_update(50_000)).code == "VALIDATION_ERROR"


def test_pycrdt_left_alone_dies_on_such_an_update():
    """Why the depth check runs first: the whole process goes (a segmentation fault)."""
    script = (
        "import pycrdt, sys\n"
        "doc = pycrdt.Doc(); doc['value'] = pycrdt.Map()\n"
        "doc.apply_update(sys.stdin.buffer.read())\n"
        "doc['value'].to_py()\n"
    )
    died = subprocess.run(
        [sys.executable, "-c", script], input=_deep_update(50_000), capture_output=True, timeout=120
    )
    assert died.returncode < 0  # killed by a signal, not an exception


def test_bytes_that_end_inside_a_part_are_malformed():
    whole = an_update("map", lambda doc, root: root.__setitem__("k", "x" * 50))
    for cut in (1, 5, 20, len(whole) - 10):
        assert refused("map", whole[:cut]).code == "MALFORMED_UPDATE"
    assert refused("map", b"\x01\x01\x05\x00\x28\x01\x05value\x01k\x01\x60").code == (
        "MALFORMED_UPDATE"  # an unknown value tag
    )


def test_mangled_updates_get_a_refusal_or_pass_and_nothing_else():
    base = an_update(
        "map",
        lambda doc, root: root.update({"a": [1, {"b": "c"}], "n": pycrdt.Map({"x": 1.5})}),
    )
    rnd = random.Random(7)
    for _ in range(5000):
        mangled = bytearray(base)
        for _ in range(rnd.randint(1, 4)):
            mangled[rnd.randrange(len(mangled))] = rnd.randrange(256)
        try:
            update_check("map", bytes(mangled))
        except ApiError as error:
            assert error.status == 400


# --- shared types nested in one another -------------------------------------------


def _nested(levels: int, make, doc: pycrdt.Doc | None = None) -> bytes:
    """``levels`` shared types, each inside the one before, in one transaction."""
    doc = doc or pycrdt.Doc()
    node = doc.get("value", type=pycrdt.Map)
    with doc.transaction():
        for _ in range(levels):
            node = make(node)
    return doc.get_update()


def _map_in(node):
    child = pycrdt.Map()
    if isinstance(node, pycrdt.Map):
        node["k"] = child
    else:
        node.append(child)
    return child


def _array_after_a_sibling(node):
    """An Array placed after an item already there: it names that item (its
    origin), not its parent."""
    child = pycrdt.Array()
    if isinstance(node, pycrdt.Map):
        node["k"] = child
    else:
        node.append("sibling")
        node.append(child)
    return child


@pytest.mark.parametrize("make", [_map_in, _array_after_a_sibling], ids=["by-parent", "by-origin"])
def test_shared_types_nested_past_the_depth_limit_in_one_update_are_refused(settings, make):
    """The shard's value counts its root as one level, as REST counts a body."""
    settings.ZEROLOCK_MAX_JSON_DEPTH = 64
    update_check("map", _nested(63, make))
    error = refused("map", _nested(64, make))
    assert (error.code, error.details["max_depth"]) == ("VALIDATION_ERROR", 64)
    assert refused("map", _nested(1000, make)).code == "VALIDATION_ERROR"


def test_nesting_is_followed_through_items_that_come_later_in_the_update(settings):
    """Two clients build one level each in turn: Yjs writes the higher client id
    first, so every other level names a parent the update holds further on."""
    settings.ZEROLOCK_MAX_JSON_DEPTH = 64
    docs = [pycrdt.Doc(client_id=1), pycrdt.Doc(client_id=2)]
    path: list[str] = []
    for level in range(70):
        doc, other = docs[level % 2], docs[1 - level % 2]
        node = doc.get("value", type=pycrdt.Map)
        for key in path:
            node = node[key]
        node[f"k{level}"] = pycrdt.Map()
        path.append(f"k{level}")
        other.apply_update(doc.get_update(other.get_state()))
    update = docs[0].get_update()
    assert (update[0], update[2]) == (2, 2)  # two clients, client 2 first
    assert refused("map", update).code == "VALIDATION_ERROR"


def _deep_and_deleted(levels: int) -> bytes:
    """``levels`` nested Y.Maps, and a deletion of the outermost: one update."""
    items = _nested(levels, _map_in, pycrdt.Doc(client_id=5))
    return pycrdt.merge_updates(items, bytes([0, 1, 5, 1, 0, 1]))  # delete (5, 0)


def test_nested_types_deleted_in_the_same_update_are_refused_before_pycrdt_sees_them():
    update = _deep_and_deleted(60_000)
    assert len(update) < 1024 * 1024  # within the body limit
    assert refused("map", update).code == "VALIDATION_ERROR"


def test_pycrdt_left_alone_dies_deleting_them():
    """Why nesting is counted across an update's items: yrs deletes a type's
    children recursively, and the process goes (a segmentation fault)."""
    script = (
        "import pycrdt, sys, threading\n"
        "doc = pycrdt.Doc(); doc['value'] = pycrdt.Map()\n"
        "update = sys.stdin.buffer.read()\n"
        "worker = threading.Thread(target=doc.apply_update, args=(update,))\n"
        "worker.start(); worker.join()\n"
    )
    died = subprocess.run(
        [sys.executable, "-c", script], input=_deep_and_deleted(60_000), capture_output=True,
        timeout=120,
    )  # fmt: skip
    assert died.returncode < 0  # killed by a signal, not an exception


def test_items_that_name_each_other_in_a_circle_are_malformed():
    # 70 Y.Maps of client 5, each placed after the next one (its origin).
    items = b"".join(bytes([0x80 | 7, 5, (n + 1) % 70, 1]) for n in range(70))
    error = refused("map", b"\x01\x46\x05\x00" + items + b"\x00")
    assert (error.code, "circle" in error.message) == ("MALFORMED_UPDATE", True)


# --- strings and numbers: REST's rules -----------------------------------------------


def _swap(update: bytes, old: bytes, new: bytes) -> bytes:
    assert update.count(old) == 1 and len(old) == len(new)
    return update.replace(old, new)


@pytest.mark.parametrize(
    ("crdt_type", "update", "says"),
    [
        ("map", an_update("map", lambda d, r: r.__setitem__("k", "a\x00b")), "NUL"),
        ("map", an_update("map", lambda d, r: r.__setitem__("k\x00", 1)), "NUL"),
        ("map", an_update("map", lambda d, r: r.__setitem__("k", {"in\x00ner": 1})), "NUL"),
        ("map", an_update("map", lambda d, r: r.__setitem__("m", pycrdt.Map({"x\x00": 1}))), "NUL"),
        ("array", an_update("array", lambda d, r: r.append(["ok", "a\x00"])), "NUL"),
        ("text", an_update("text", lambda d, r: r.insert(0, "te\x00xt")), "NUL"),
        ("map", an_update("map", lambda d, r: r.__setitem__("m", pycrdt.Text("t\x00"))), "NUL"),
        # A lone surrogate, encoded (not UTF-8): in a value, and as text.
        ("map", _swap(an_update("map", lambda d, r: r.__setitem__("k", "XYZ")), b"XYZ",
                      b"\xed\xa0\x80"), "valid Unicode"),
        ("text", _swap(an_update("text", lambda d, r: r.insert(0, "XYZ")), b"XYZ",
                       b"\xed\xa0\x80"), "valid Unicode"),
        ("map", an_update("map", lambda d, r: r.__setitem__("n", float("nan"))), "out of range"),
        ("array", an_update("array", lambda d, r: r.append(float("-inf"))), "out of range"),
        ("array", an_update("array", lambda d, r: r.append([1e308 * 10])), "out of range"),
    ],
    ids=["value", "key", "nested-key", "y-map-key", "array-item", "text", "nested-text",
         "surrogate-value", "surrogate-text", "nan", "-inf", "inf-in-a-list"],
)  # fmt: skip
def test_strings_with_nul_or_not_unicode_and_numbers_that_are_not_finite_are_refused(
    crdt_type, update, says
):
    """What REST refuses (common.inputs), since PostgreSQL's jsonb refuses it when
    a compaction stores the value."""
    error = refused(crdt_type, update)
    assert error.code == "VALIDATION_ERROR"
    assert says in error.message


def test_json_content_is_held_to_the_same_rules():
    """Content kind 2 (JSON text, as old Yjs wrote it): an escaped NUL is a NUL."""

    def json_item(text: bytes) -> bytes:
        return b"\x01\x01\x05\x00\x02\x01\x05value\x01" + bytes([len(text)]) + text + b"\x00"

    # An unkeyed item under a map root is refused for its place; use an array.
    update_check("array", json_item(b'{"a": [1, "x"]}'))
    update_check("array", json_item(b"undefined"))
    assert "NUL" in refused("array", json_item(b'"a\\u0000"')).message
    assert refused("array", json_item(b"[1,")).code == "MALFORMED_UPDATE"
