"""CRDT op parsing and the JSON each op leaves behind: the pure rules. No database."""

import random

import pycrdt
import pytest

from common.errors import ApiError
from shards.crdt import (
    AdditiveOp,
    apply_op,
    initial_json,
    is_empty_update,
    load,
    new_state,
    parse_op,
    state_json,
)


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
