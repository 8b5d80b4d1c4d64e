"""JSON paths: the pure rules under a transaction's put/delete/compare and a
lease's end. No database."""

import pytest

from common.errors import ApiError
from common.jsonpaths import ABSENT, path_delete, path_get, path_put


def test_a_path_reads_through_objects_and_arrays_and_negative_indexes():
    value = {"a": {"b": [10, 20, {"c": "deep"}]}}
    assert path_get(value, ("a", "b", 2, "c")) == "deep"
    assert path_get(value, ("a", "b", -1, "c")) == "deep"
    assert path_get(value, ()) is value


def test_a_path_that_leads_nowhere_finds_absent_not_none():
    value = {"a": None, "list": [1]}
    assert path_get(value, ("a",)) is None  # null is a value
    assert path_get(value, ("missing",)) is ABSENT
    assert path_get(value, ("list", 1)) is ABSENT  # past the end
    assert path_get(value, ("list", "0")) is ABSENT  # a string does not index an array
    assert path_get(value, ("a", "below-null")) is ABSENT


def test_put_creates_the_objects_on_its_way_and_leaves_the_caller_s_value_unshared():
    new = {"deep": [1, 2]}
    value = path_put({"keep": 1}, ("x", "y"), new, "success[0]")
    assert value == {"keep": 1, "x": {"y": {"deep": [1, 2]}}}
    new["deep"].append(3)  # a later change to the argument does not leak in
    assert value["x"]["y"] == {"deep": [1, 2]}


def test_put_replaces_an_array_item_in_place_but_never_grows_an_array():
    assert path_put({"l": [1, 2, 3]}, ("l", 1), "two", "w") == {"l": [1, "two", 3]}
    with pytest.raises(ApiError) as refused:
        path_put({"l": [1]}, ("l", 5), "x", "success[2]")
    assert refused.value.code == "PATH_CONFLICT"
    assert refused.value.details["at"] == "success[2]"


def test_put_through_a_string_or_number_is_a_path_conflict():
    for value in ({"a": "text"}, {"a": 7}):
        with pytest.raises(ApiError) as refused:
            path_put(value, ("a", "b"), 1, "w")
        assert refused.value.status == 400


def test_put_at_the_root_replaces_the_whole_value():
    assert path_put({"old": 1}, (), {"new": 2}, "w") == {"new": 2}


def test_delete_removes_a_key_or_an_item_and_says_whether_anything_was_there():
    value = {"a": {"b": 1, "c": 2}, "l": ["x", "y"]}
    assert path_delete(value, ("a", "b")) is True
    assert path_delete(value, ("l", 0)) is True
    assert value == {"a": {"c": 2}, "l": ["y"]}
    assert path_delete(value, ("a", "b")) is False
    assert path_delete(value, ("nowhere", "deep")) is False
    assert path_delete(value, ("l", 9)) is False


def test_json_equal_keeps_booleans_apart_from_numbers_and_numbers_by_value():
    from common.jsonpaths import json_equal

    assert json_equal({"a": [1, 2.5, None, "x"]}, {"a": [1.0, 2.5, None, "x"]})
    assert not json_equal(True, 1) and not json_equal(0, False)
    assert not json_equal({"a": 1}, {"a": 1, "b": 1})
    assert not json_equal([1, 2], [1, 2, 3])
    assert not json_equal(None, 0) and not json_equal("1", 1)
