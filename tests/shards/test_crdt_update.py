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
