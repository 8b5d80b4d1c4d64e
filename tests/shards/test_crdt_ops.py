"""CRDT op parsing and the JSON each op leaves behind: the pure rules. No database."""

import json
import random
import time

import pycrdt
import pytest

from common.errors import ApiError
from shards.crdt import (
    AdditiveOp,
    apply_op,
    apply_update,
    initial_json,
    is_empty_update,
    load,
    new_state,
    parse_op,
    render,
    state_json,
)
from shards.crdt_update import update_check


def unsupported(crdt_type: str, body: dict) -> ApiError:
    with pytest.raises(ApiError) as refused:
        parse_op(crdt_type, body)
    assert (refused.value.status, refused.value.code) == (400, "UNSUPPORTED_DIFF")
    return refused.value


def test_each_crdt_type_takes_exactly_its_own_intent():
    assert parse_op("map", {"new_value": {"a": 1}}) == AdditiveOp("patch", {"a": 1})
    assert parse_op("array", {"append": [1, 2]}) == AdditiveOp("append", [1, 2])
    assert parse_op("text", {"delta": [{"insert": "hi"}]}) == AdditiveOp(
        "delta", [{"insert": "hi"}]
    )
    assert "append intent" in unsupported("array", {"new_value": [1]}).message
    assert "patch of top-level keys" in unsupported("map", {"append": [1]}).message
    unsupported("map", {"new_value": {"a": 1}, "append": [1]})  # two intents at once


def test_empty_or_ill_shaped_payloads_are_refused():
    unsupported("map", {"new_value": {}})
    unsupported("array", {"append": []})
    unsupported("text", {"delta": []})
    unsupported("text", {"delta": [{"retain": 1, "insert": "x"}]})
    unsupported("text", {"delta": [{"retain": 0}]})
    unsupported("text", {"delta": [{"delete": True}]})
    unsupported("text", {"delta": [{"insert": ""}]})
    assert "Unknown delta operation" in unsupported("text", {"delta": [{"bold": 1}]}).message


def test_an_op_is_stored_in_the_shape_the_client_sent():
    assert AdditiveOp("patch", {"a": 1}).as_json() == {"new_value": {"a": 1}}
    assert AdditiveOp("append", [1]).as_json() == {"append": [1]}


def test_initial_values_must_match_the_crdt_type_and_none_means_empty():
    assert initial_json("map", None) == {} and initial_json("text", None) == ""
    with pytest.raises(ApiError):
        initial_json("array", {"not": "a list"})


def test_ops_merge_into_the_doc_and_integers_come_back_as_integers():
    doc, value = load("map", new_state("map", {"count": 1}))
    update, value = apply_op("map", doc, value, parse_op("map", {"new_value": {"n": 2}}))
    assert value == {"count": 1, "n": 2}
    assert isinstance(value["n"], int)  # pycrdt hands back floats; clients sent ints
    assert not is_empty_update(update)
    assert state_json("map", new_state("map", {"count": 1}), update) == {"count": 1, "n": 2}


def test_a_text_delta_edits_in_place():
    doc, value = load("text", new_state("text", "hello"))
    _, value = apply_op(
        "text", doc, value, parse_op("text", {"delta": [{"retain": 5}, {"insert": "!"}]})
    )
    assert value == "hello!"


def test_an_append_makes_byte_for_byte_the_update_and_doc_that_pycrdts_extend_makes():
    """Items appended one per transaction (pycrdt's extend is quadratic) still
    make one update per operation, in order, identical to extend's."""
    items = [1, 2.5, "s", None, True, {"a": [1, {"b": "é😀"}]}, [1, 2], 2**40] * 40

    def a_doc() -> tuple[pycrdt.Doc, pycrdt.Array]:
        doc = pycrdt.Doc(client_id=7)
        doc["value"] = root = pycrdt.Array()
        root.append("first")
        return doc, root

    doc, _ = a_doc()
    update, value = apply_op("array", doc, ["first"], parse_op("array", {"append": items}))
    reference, root = a_doc()
    before = reference.get_state()
    root.extend(items)
    assert update == reference.get_update(before)
    assert doc.get_update() == reference.get_update()
    assert value == ["first", *items] == state_json("array", doc.get_update())


def test_a_shard_created_with_items_holds_them_in_order_in_one_run():
    items = [{"n": n} for n in range(500)]
    state = new_state("array", items)
    assert state_json("array", state) == items
    # One client, one struct: the items joined into a single run as extend's do.
    assert state[:2] == b"\x01\x01"


def _delta_by_hand(text: str, delta: list[dict]) -> str:
    """What a delta means, step by step on a plain string."""
    out, cursor = "", 0
    for step in delta:
        ((name, arg),) = step.items()
        if name == "retain":
            out, cursor = out + text[cursor : cursor + arg], cursor + arg
        elif name == "insert":
            out += arg
        else:
            cursor += arg
    return out + text[cursor:]


def _a_delta(rnd: random.Random, length: int, steps: int) -> list[dict]:
    delta, left = [], length
    for _ in range(steps):
        roll = rnd.random()
        if roll < 0.4 and left:
            n = rnd.randint(1, min(left, 5))
            delta.append({"retain": n})
            left -= n
        elif roll < 0.7 and left:
            n = rnd.randint(1, min(left, 3))
            delta.append({"delete": n})
            left -= n
        else:
            delta.append({"insert": rnd.choice(["x", "é", "😀", "ab", "日本"])})
    return delta


@pytest.mark.parametrize("seed", range(6))
def test_a_delta_of_any_shape_leaves_the_doc_and_the_value_as_applied_step_by_step(seed):
    """Many edits (more than one chunk of them, see _apply_delta), deletes and
    inserts side by side, characters of one to four UTF-8 bytes."""
    rnd = random.Random(seed)
    text = "".join(rnd.choice("aé😀日 ") for _ in range(rnd.randint(0, 2000)))
    doc, _ = load("text", new_state("text", text))
    value = text
    for _ in range(3):
        delta = _a_delta(rnd, len(value), rnd.choice([1, 5, 300, 1500]))
        update, new_value = apply_op("text", doc, value, parse_op("text", {"delta": delta}))
        assert new_value == _delta_by_hand(value, delta)
        assert str(doc["value"]) == new_value
        value = new_value
    assert state_json("text", doc.get_update()) == value


# --- what a Yjs update leaves: render and apply_update -----------------------------


def _as_before(value):
    """How render turned pycrdt's values into JSON until it read pycrdt's JSON:
    to_py, then integral floats back to ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _as_before(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_before(v) for v in value]
    return value


def _a_value(rnd: random.Random, depth: int = 0):
    roll = rnd.random()
    if depth < 4 and roll < 0.15:
        return pycrdt.Map({f"m{i}": _a_value(rnd, depth + 1) for i in range(rnd.randint(0, 3))})
    if depth < 4 and roll < 0.25:
        return pycrdt.Array([_a_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))])
    if depth < 4 and roll < 0.3:
        return pycrdt.Text("tëxt😀")
    if depth < 4 and roll < 0.4:
        return {"plain": [1, 2.5, {"x": None}], "n": rnd.randint(-5, 5)}
    return rnd.choice([0, 1, -7, 2.5, 1e21, 1e300, 2.5e-8, -0.0, 2**40, 2**62, "s", "é\u2028",
                       None, True, False, [], {}])  # fmt: skip


@pytest.mark.parametrize("crdt_type", ["map", "array"])
def test_render_gives_the_json_value_to_py_gave_numbers_and_their_types_included(crdt_type):
    """Keys are compared sorted: yrs orders a map's keys at random in each process,
    for to_py and its JSON alike (measured)."""
    rnd = random.Random(crdt_type)
    for _ in range(30):
        doc, root = load(crdt_type)
        for _n in range(rnd.randint(0, 12)):
            if crdt_type == "map":
                root[f"k{rnd.randint(0, 8)}"] = _a_value(rnd)
            else:
                root.insert(rnd.randint(0, len(root)), _a_value(rnd))
        rendered, before = render(crdt_type, doc), _as_before(root.to_py())
        # JSON tells 1 from 1.0: the same numbers, of the same types.
        assert json.dumps(rendered, sort_keys=True) == json.dumps(before, sort_keys=True)


def test_an_array_written_by_many_clients_renders_in_time_linear_in_its_items():
    """to_py reads an Array by index, each read walking it from the start: 20,000
    items in 20,000 runs (two clients taking turns) took 7.5 s, under the write
    lock on every Yjs update to the shard."""
    docs = [pycrdt.Doc(client_id=1), pycrdt.Doc(client_id=2)]
    for n in range(20_000):
        writer, other = docs[n % 2], docs[1 - n % 2]
        before = writer.get_state()
        writer.get("value", type=pycrdt.Array).insert(0, {"n": n})
        other.apply_update(writer.get_update(before))
    doc, _ = load("array", docs[0].get_update())
    started = time.thread_time()  # this thread's CPU: other processes' load does not count
    value = render("array", doc)
    assert time.thread_time() - started < 2  # 0.03 s here
    assert value[0] == {"n": 19_999} and len(value) == 20_000


def _yjs_apply(crdt_type: str, doc: pycrdt.Doc, update: bytes):
    return apply_update(crdt_type, doc, update, update_check(crdt_type, update))


def test_types_nested_one_update_at_a_time_stop_at_the_depth_limit(settings):
    """Each update adds one level under a type stored earlier, which the update
    itself names only by id: the whole value is measured once it is in."""
    settings.ZEROLOCK_MAX_JSON_DEPTH = 64
    server, _ = load("map", new_state("map", {}))
    client = pycrdt.Doc()
    node = client.get("value", type=pycrdt.Map)

    def nest(node):  # maps and arrays in turn
        child = pycrdt.Array() if isinstance(node, pycrdt.Map) else pycrdt.Map()
        if isinstance(node, pycrdt.Map):
            node["k"] = child
        else:
            node.append(child)
        return child

    for _ in range(63):  # 64 levels with the root
        before = client.get_state()
        node = nest(node)
        update, _ = _yjs_apply("map", server, client.get_update(before))
        assert update is not None
    before = client.get_state()
    nest(node)
    with pytest.raises(ApiError) as refused:
        _yjs_apply("map", server, client.get_update(before))
    assert (refused.value.code, refused.value.details["max_depth"]) == ("VALIDATION_ERROR", 64)


def test_an_update_that_would_wait_in_the_doc_for_clocks_it_lacks_is_refused():
    """yrs would keep it pending and integrate it whole once they come: parts
    checked update by update would join into what no check saw."""
    client = pycrdt.Doc()
    root = client.get("value", type=pycrdt.Map)
    root["first"] = 1
    state = client.get_state()
    root["second"] = 2
    second_only = client.get_update(state)
    server, _ = load("map", new_state("map", {}))
    with pytest.raises(ApiError) as refused:
        _yjs_apply("map", server, second_only)
    assert refused.value.code == "UNSUPPORTED_UPDATE"
    assert "does not have" in refused.value.message
    update, value = _yjs_apply("map", server, client.get_update())  # the whole of it
    assert value == {"first": 1, "second": 2}
