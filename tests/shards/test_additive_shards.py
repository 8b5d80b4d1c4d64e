"""Additive (CRDT) shards through the REST API: every contribution survives."""

import pytest

from shards.crdt import state_json
from shards.models import Shard
from shards.selectors import shard_current_value

pytestmark = pytest.mark.django_db


def create(client, shard_id, crdt_type, initial=None, **extra):
    body = {"id": shard_id, "type": "additive", "crdt_type": crdt_type, **extra}
    if initial is not None:
        body["initial_value"] = initial
    return client.post("/api/shards", body, format="json")


def commit(client, shard_id, body):
    return client.post(f"/api/shards/{shard_id}/commit", body, format="json")


def stored(shard_id):
    """The JSON value and the pycrdt Doc's own rendering of it: they must agree."""
    shard = Shard.objects.get(pk=shard_id)
    updates = shard.crdt_updates.filter(version__gt=shard.crdt_state_version).order_by("version")
    doc_value = state_json(
        shard.crdt_type, bytes(shard.crdt_state), *(bytes(u.update) for u in updates)
    )
    return shard_current_value(shard), doc_value


def test_a_map_shard_takes_patches_set_delete_and_leave_untouched(planner):
    assert create(planner, "notes", "map", {"keep": 1, "drop": 2}).status_code == 201
    response = commit(planner, "notes", {"new_value": {"drop": None, "add": {"nested": [1, 2.5]}}})
    assert response.status_code == 200
    assert response.json()["version"] == 2
    value = {"keep": 1, "add": {"nested": [1, 2.5]}}
    assert response.json()["value"] == value
    assert planner.get("/api/shards/notes").json()["value"] == value
    json_value, doc_value = stored("notes")
    assert json_value == doc_value == value
    assert isinstance(planner.get("/api/shards/notes").json()["value"]["keep"], int)


def test_an_array_shard_appends_in_order_and_gives_back_the_json_it_got(planner):
    create(planner, "log", "array")
    commit(planner, "log", {"append": [1, {"a": 2}]})
    response = commit(planner, "log", {"append": ["three", [4]]})
    assert response.json() == {
        "version": 3,
        "value": [1, {"a": 2}, "three", [4]],
        "audit_entry_id": response.json()["audit_entry_id"],
    }
    assert stored("log")[0] == stored("log")[1]


def test_a_text_shard_applies_deltas_counting_characters(planner):
    create(planner, "doc", "text", "héllo wörld")
    delta = [{"retain": 1}, {"delete": 1}, {"insert": "e"}, {"retain": 9}, {"insert": "!"}]
    response = commit(planner, "doc", {"delta": delta})
    assert response.status_code == 200
    assert response.json()["value"] == "hello wörld!"
    assert stored("doc") == ("hello wörld!", "hello wörld!")


@pytest.mark.parametrize(
    ("crdt_type", "body"),
    [
        ("array", {"new_value": [1, 2, 3]}),
        ("array", {"append": "not a list"}),
        ("array", {"append": []}),
        ("array", {"append": [1], "delta": []}),
        ("map", {"append": [1]}),
        ("map", {"new_value": ["a"]}),
        ("map", {"new_value": {}}),
        ("text", {"new_value": "whole text"}),
        ("text", {"delta": [{"retain": 99}, {"insert": "x"}]}),
        ("text", {"delta": [{"insert": "x"}, {"delete": 6}]}),
        ("text", {"delta": [{"retain": -1}]}),
        ("text", {"delta": [{"retain": True}]}),
        ("text", {"delta": [{"bold": 1}]}),
        ("text", {"delta": [{"insert": "a", "retain": 1}]}),
        ("text", {"delta": "abc"}),
    ],
)
def test_bad_additive_bodies_get_unsupported_diff_and_change_nothing(planner, crdt_type, body):
    initial = {"array": [0], "map": {"k": 0}, "text": "hello"}[crdt_type]
    create(planner, "target", crdt_type, initial)
    before = Shard.objects.get(pk="target")
    response = commit(planner, "target", body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "UNSUPPORTED_DIFF"
    after = Shard.objects.get(pk="target")
    assert (after.version, after.value, bytes(after.crdt_state)) == (
        before.version,
        before.value,
        bytes(before.crdt_state),
    )
    assert not after.crdt_updates.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"id": "x", "type": "additive"},
        {"id": "x", "type": "additive", "crdt_type": "set"},
        {"id": "x", "type": "additive", "crdt_type": "array", "initial_value": {"a": 1}},
        {"id": "x", "type": "additive", "crdt_type": "map", "initial_value": [1]},
        {"id": "x", "type": "additive", "crdt_type": "text", "initial_value": 5},
    ],
)
def test_bad_additive_shard_definitions_are_validation_errors(planner, body):
    response = planner.post("/api/shards", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


def test_an_additive_commit_never_goes_stale(planner):
    create(planner, "log", "array")
    commit(planner, "log", {"append": [1]})
    response = commit(planner, "log", {"append": [2], "expected_version": 1})
    assert response.status_code == 200
    assert response.json()["value"] == [1, 2]


def test_an_additive_commit_outside_the_schema_is_refused_and_writes_nothing(planner):
    create(planner, "scores", "array", value_schema={"type": "array", "items": {"type": "integer"}})
    response = commit(planner, "scores", {"append": [1, "two"]})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "SCHEMA_VIOLATION"
    assert stored("scores") == ([], [])


def test_an_irreversible_additive_shard_is_behind_the_gate(planner):
    create(planner, "ledger", "array", reversible=False)
    response = commit(planner, "ledger", {"append": [1]})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "APPROVAL_REQUIRED"


def test_additive_history_lists_each_applied_operation(planner):
    create(planner, "log", "array", [0])
    commit(planner, "log", {"append": [1]})
    commit(planner, "log", {"append": [2, 3]})
    history = planner.get("/api/shards/log/history").json()
    assert [(h["version"], h["value"]) for h in history] == [
        (1, [0]),
        (2, {"append": [1]}),
        (3, {"append": [2, 3]}),
    ]


def test_the_update_log_folds_into_the_snapshot_and_a_cold_process_rebuilds_it(planner):
    from shards import crdt_store

    create(planner, "long", "array")
    for n in range(crdt_store.COMPACT_EVERY + 5):
        commit(planner, "long", {"append": [n]})
    shard = Shard.objects.get(pk="long")
    assert shard.crdt_state_version == 1 + crdt_store.COMPACT_EVERY  # version 1 is the creation
    assert shard.value == list(range(crdt_store.COMPACT_EVERY))
    assert shard.crdt_updates.filter(version__gt=shard.crdt_state_version).count() == 5
    crdt_store.forget("long")  # as another process would see it: no cache
    value = planner.get("/api/shards/long").json()["value"]
    assert value == list(range(crdt_store.COMPACT_EVERY + 5))
    assert stored("long")[0] == stored("long")[1] == value


def test_a_delta_of_more_edits_than_the_limit_is_refused_whole_and_retains_do_not_count(
    planner, settings
):
    settings.ZEROLOCK_MAX_DELTA_EDITS = 3
    create(planner, "doc", "text", "abcdefgh")
    # Three edits: a run of inserts and deletes between two retains is one.
    three = [{"insert": "A"}, {"delete": 1}, {"retain": 2}, {"delete": 1}, {"insert": "B"},
             {"retain": 1}, {"retain": 1}, {"insert": "C"}]  # fmt: skip
    assert commit(planner, "doc", {"delta": three}).json()["value"] == "AbcBefCgh"
    before = Shard.objects.get(pk="doc").version

    four = [*three, {"retain": 1}, {"insert": "D"}]
    response = commit(planner, "doc", {"delta": four})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["max_edits"]) == ("UNSUPPORTED_DIFF", 3)
    assert "4 edits" in error["message"]
    assert Shard.objects.get(pk="doc").version == before
    assert stored("doc") == ("AbcBefCgh", "AbcBefCgh")
