"""Transactions: parsing and compare evaluation, the pure rules. Every shape of
body is checked before anything is read or written. No database."""

import pytest

from common.errors import ApiError
from coordination.txn import MAX_ITEMS, Compare, compare_holds, txn_parse
from shards.models import Shard


def refusal(body) -> ApiError:
    with pytest.raises(ApiError) as refused:
        txn_parse(body)
    assert refused.value.status == 400
    return refused.value


def shard_at(version: int) -> Shard:
    return Shard(id="s", type="decision", version=version)


def test_a_claim_parses_into_compares_and_both_branches():
    txn = txn_parse(
        {
            "compare": [{"shard_id": "task:1", "path": ["owner"], "op": "not_exists"}],
            "success": [{"op": "put", "shard_id": "task:1", "path": ["owner"], "value": "a"}],
            "failure": [{"op": "get", "shard_id": "task:1", "path": ["owner"]}],
            "fence": 7,
        }
    )
    assert txn.compare == [Compare("task:1", "not_exists", ("owner",))]
    assert [op.op for op in txn.success] == ["put"]
    assert txn.written(txn.success) == {"task:1"} and txn.written(txn.failure) == set()
    assert txn.fence == 7 and txn.shard_ids == {"task:1"}


def test_a_body_with_no_operations_or_unknown_fields_is_refused():
    assert "at least one" in refusal({"compare": []}).message
    assert "Unknown fields" in refusal({"success": [], "extra": 1}).message
    assert refusal([]).code == "VALIDATION_ERROR"


def test_each_bad_item_is_refused_and_named_by_where_it_is():
    bad_put = {"success": [{"op": "get", "shard_id": "a"}, {"op": "put", "shard_id": "a"}]}
    assert refusal(bad_put).details["at"] == "success[1]"
    bad_id = {"success": [{"op": "get", "shard_id": "../etc"}]}
    assert refusal(bad_id).details["at"] == "success[0]"
    bad_path = {"success": [{"op": "get", "shard_id": "a", "path": [True]}]}
    assert "path parts" in refusal(bad_path).message
    whole_delete = {"success": [{"op": "delete", "shard_id": "a"}]}
    assert "needs a path" in refusal(whole_delete).message
    empty_append = {"success": [{"op": "append", "shard_id": "a", "items": []}]}
    assert "non-empty" in refusal(empty_append).message


@pytest.mark.parametrize("op", [{}, [], ["=="], 1, None, True])
def test_a_compare_op_that_is_not_a_string_is_refused_not_a_crash(op):
    # A set lookup of an object or a list raised TypeError: a 500.
    compare = {
        "compare": [{"shard_id": "a", "op": op, "value": 1}],
        "success": [{"op": "get", "shard_id": "a"}],
    }
    assert refusal(compare).details["at"] == "compare[0]"


def test_lists_and_paths_are_bounded():
    too_many = {"success": [{"op": "get", "shard_id": "a"}] * (MAX_ITEMS + 1)}
    assert str(MAX_ITEMS) in refusal(too_many).message
    too_deep = {"success": [{"op": "get", "shard_id": "a", "path": ["k"] * 33}]}
    assert "at most 32" in refusal(too_deep).message


def test_fences_and_versions_must_be_proper_integers():
    for fence in (0, -1, True, "3", 1.5):
        bad = refusal({"success": [{"op": "get", "shard_id": "a"}], "fence": fence})
        assert "fence" in bad.message
    get = [{"op": "get", "shard_id": "a"}]
    for version in (-1, True, "1"):
        bad = refusal({"compare": [{"shard_id": "a", "version": version}], "success": get})
        assert "non-negative integer" in bad.message
    mixed = {"compare": [{"shard_id": "a", "version": 1, "op": "=="}], "success": get}
    assert "only shard_id and version" in refusal(mixed).message


def test_a_version_compare_holds_only_for_that_version_and_a_missing_shard_is_version_0():
    assert compare_holds(Compare("s", "version", version=3), shard_at(3), None)
    assert not compare_holds(Compare("s", "version", version=2), shard_at(3), None)
    assert compare_holds(Compare("s", "version", version=0), None, None)


def test_value_compares_read_the_path_and_treat_absent_apart_from_null():
    shard, value = shard_at(1), {"owner": None, "n": 5}
    assert compare_holds(Compare("s", "exists", ("owner",)), shard, value)
    assert compare_holds(Compare("s", "not_exists", ("other",)), shard, value)
    assert compare_holds(Compare("s", "==", ("owner",), None), shard, value)
    assert not compare_holds(Compare("s", "==", ("other",), None), shard, value)
    assert compare_holds(Compare("s", "!=", ("other",), None), shard, value)
    assert compare_holds(Compare("s", ">", ("n",), 4), shard, value)
    assert compare_holds(Compare("s", "<", ("n",), 6), shard, value)
    # Order between a number and a string does not hold either way (no TypeError).
    assert not compare_holds(Compare("s", "<", ("n",), "6"), shard, value)
    assert not compare_holds(Compare("s", ">", ("n",), "6"), shard, value)
    # On a shard that does not exist nothing is found.
    assert compare_holds(Compare("s", "not_exists", ("owner",)), None, None)


def test_true_is_not_the_number_one_at_any_depth():
    shard, value = shard_at(1), {"done": True, "n": 1, "tags": [1, {"x": 0}], "f": 2.0}
    assert not compare_holds(Compare("s", "==", ("done",), 1), shard, value)
    assert not compare_holds(Compare("s", "==", ("n",), True), shard, value)
    assert compare_holds(Compare("s", "!=", ("n",), True), shard, value)
    assert not compare_holds(Compare("s", "==", ("tags",), [True, {"x": False}]), shard, value)
    assert compare_holds(Compare("s", "==", ("tags",), [1, {"x": 0}]), shard, value)
    # Numbers are numbers: 2 equals 2.0 (pycrdt hands integers back as floats).
    assert compare_holds(Compare("s", "==", ("f",), 2), shard, value)
    assert compare_holds(Compare("s", "==", (), dict(value)), shard, value)


def test_only_two_numbers_or_two_strings_have_an_order():
    shard, value = shard_at(1), {"done": True, "name": "b", "list": [1, 2]}
    assert not compare_holds(Compare("s", "<", ("done",), 2), shard, value)
    assert not compare_holds(Compare("s", ">", ("done",), False), shard, value)
    assert not compare_holds(Compare("s", "<", ("list",), [1, 3]), shard, value)
    assert compare_holds(Compare("s", "<", ("name",), "c"), shard, value)
    assert compare_holds(Compare("s", ">", ("name",), "a"), shard, value)
