"""Prefer: return=minimal on the writes that answer with a value: the answer keeps
the version and the audit id, leaves the value out, and says Preference-Applied."""

from __future__ import annotations

import httpx
import pytest

from access.identity import Actor
from access.services import api_key_create
from shards.models import Shard
from shards.services import shard_create

pytestmark = pytest.mark.django_db

MINIMAL = {"HTTP_PREFER": "return=minimal"}


def commit(client, shard_id, body, **headers):
    return client.post(f"/api/shards/{shard_id}/commit", body, format="json", **headers)


def test_a_minimal_decision_commit_answers_the_version_and_audit_id_only(planner):
    planner.post(
        "/api/shards", {"id": "plan", "type": "decision", "initial_value": {"a": 1}}, format="json"
    )
    minimal = commit(planner, "plan", {"expected_version": 1, "new_value": {"a": 2}}, **MINIMAL)
    assert minimal.status_code == 200
    assert minimal["Preference-Applied"] == "return=minimal"
    assert set(minimal.json()) == {"version", "audit_entry_id"}
    assert minimal.json()["version"] == 2
    assert Shard.objects.get(pk="plan").value == {"a": 2}
    full = commit(planner, "plan", {"expected_version": 2, "new_value": {"a": 3}})
    assert full.json()["value"] == {"a": 3} and not full.has_header("Preference-Applied")
    # Another preference changes nothing.
    other = commit(
        planner,
        "plan",
        {"expected_version": 3, "new_value": {"a": 4}},
        HTTP_PREFER="return=representation",
    )
    assert other.json()["value"] == {"a": 4} and not other.has_header("Preference-Applied")


def test_a_refused_commit_keeps_its_error_envelope_whatever_the_preference(planner):
    planner.post(
        "/api/shards", {"id": "plan", "type": "decision", "initial_value": 1}, format="json"
    )
    commit(planner, "plan", {"expected_version": 1, "new_value": 2})
    stale = commit(planner, "plan", {"expected_version": 1, "new_value": 3}, **MINIMAL)
    assert stale.status_code == 409
    assert stale.json()["error"]["current_value"] == 2
    assert not stale.has_header("Preference-Applied")


@pytest.mark.parametrize(
    ("crdt_type", "initial", "body"),
    [
        ("array", [1], {"append": [2]}),
        ("map", {"a": 1}, {"new_value": {"b": 2}}),
        ("text", "hi", {"delta": [{"retain": 2}, {"insert": "!"}]}),
    ],
)
def test_a_minimal_additive_commit_answers_without_the_merged_value(
    planner, crdt_type, initial, body
):
    planner.post(
        "/api/shards",
        {"id": "notes", "type": "additive", "crdt_type": crdt_type, "initial_value": initial},
        format="json",
    )
    minimal = commit(planner, "notes", body, **MINIMAL)
    assert minimal.status_code == 200, minimal.json()
    assert minimal["Preference-Applied"] == "return=minimal"
    assert set(minimal.json()) == {"version", "audit_entry_id"}
    assert planner.get("/api/shards/notes").json()["version"] == 2


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_an_append_to_a_ten_thousand_item_array_answers_a_small_body_when_minimal(
    live_server_url,
):
    """Over a real socket: the bytes on the wire, not a rendered dict."""
    items = [f"item-{n:05}" for n in range(10_000)]
    shard_create(
        actor=Actor("seed"),
        shard_id="big-log",
        shard_type="additive",
        crdt_type="array",
        initial_value=items,
    )
    _, key = api_key_create(name="appender", permissions=["shard:read", "shard:write"])
    headers = {"X-API-Key": key, "X-Agent-Id": "appender-1"}
    with httpx.Client(base_url=live_server_url, headers=headers, timeout=60) as http:
        minimal = http.post(
            "/api/shards/big-log/commit",
            json={"append": ["one more"]},
            headers={"Prefer": "return=minimal"},
        )
        full = http.post("/api/shards/big-log/commit", json={"append": ["and another"]})
    assert minimal.status_code == 200, minimal.text
    assert minimal.headers["Preference-Applied"] == "return=minimal"
    assert minimal.json() == {"version": 2, "audit_entry_id": minimal.json()["audit_entry_id"]}
    print(f"\nappend answer: {len(minimal.content)} bytes minimal, {len(full.content)} bytes full")
    assert len(minimal.content) < 100
    assert len(full.json()["value"]) == 10_002  # the whole array, without the preference
