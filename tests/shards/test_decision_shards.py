"""Decision shards through the REST API: create, read, commit, history, delete."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from shards.models import Delivery

pytestmark = pytest.mark.django_db


def create(client, shard_id="db_schema_choice", **extra):
    body = {"id": shard_id, "type": "decision", "initial_value": "postgres", **extra}
    return client.post("/api/shards", body, format="json")


def test_an_agent_creates_a_decision_shard_at_version_one(planner):
    response = create(planner, value_schema={"enum": ["postgres", "dynamodb"]}, reversible=True)
    assert response.status_code == 201
    shard = response.json()
    assert shard["id"] == "db_schema_choice"
    assert shard["type"] == "decision"
    assert shard["crdt_type"] is None
    assert shard["owner_policy"] == "single-writer"
    assert shard["version"] == 1
    assert shard["value"] == "postgres"
    assert shard["created_by"] == "planner-1"
    for field in ("created_at", "updated_at", "value_schema", "reversible"):
        assert field in shard


def test_creating_an_existing_shard_is_a_conflict(planner):
    create(planner)
    response = create(planner)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "SHARD_EXISTS"


@pytest.mark.parametrize(
    "body",
    [
        {"id": "has space", "type": "decision"},
        {"id": "x" * 129, "type": "decision"},
        {"id": "", "type": "decision"},
        {"id": "ok", "type": "ledger"},
        {"id": "ok"},
        {"id": "ok", "type": "decision", "crdt_type": "map"},
        {"id": "ok", "type": "decision", "value_schema": {"type": "not-a-type"}},
        {"id": "ok", "type": "decision", "owner_policy": "owners-only"},
        {"id": "ok", "type": "decision", "reversible": "perhaps"},
    ],
)
def test_invalid_create_bodies_get_validation_error(planner, body):
    response = planner.post("/api/shards", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"
    assert response.json()["error"]["message"]


def test_an_initial_value_outside_the_schema_is_a_schema_violation(planner):
    response = create(planner, initial_value="mysql", value_schema={"enum": ["postgres"]})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "SCHEMA_VIOLATION"


def test_reading_a_shard_returns_value_and_version_and_records_the_delivery(planner):
    create(planner)
    response = planner.get("/api/shards/db_schema_choice")
    assert response.status_code == 200
    assert (response.json()["value"], response.json()["version"]) == ("postgres", 1)
    delivery = Delivery.objects.get(shard_id="db_schema_choice")
    assert (delivery.agent_id, delivery.version) == ("planner-1", 1)


def test_reading_a_missing_shard_is_shard_not_found(planner):
    response = planner.get("/api/shards/nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "SHARD_NOT_FOUND"


def test_a_commit_on_the_current_version_applies_and_bumps_the_version(planner):
    create(planner)
    response = planner.post(
        "/api/shards/db_schema_choice/commit",
        {"expected_version": 1, "new_value": "dynamodb"},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert body["version"] == 2
    assert body["value"] == "dynamodb"
    assert isinstance(body["audit_entry_id"], int)
    assert planner.get("/api/shards/db_schema_choice").json()["value"] == "dynamodb"


def test_a_commit_on_a_stale_version_gets_409_with_the_current_state(planner):
    create(planner)
    planner.post(
        "/api/shards/db_schema_choice/commit",
        {"expected_version": 1, "new_value": "dynamodb"},
        format="json",
    )
    response = planner.post(
        "/api/shards/db_schema_choice/commit",
        {"expected_version": 1, "new_value": "cassandra"},
        format="json",
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "STALE_VERSION"
    assert error["current_version"] == 2
    assert error["current_value"] == "dynamodb"
    assert planner.get("/api/shards/db_schema_choice").json()["value"] == "dynamodb"


def test_a_commit_whose_read_set_moved_on_gets_read_set_stale_and_writes_nothing(planner):
    create(planner, "budget", initial_value=100)
    create(planner, "plan", initial_value="cheap")
    planner.post(
        "/api/shards/budget/commit", {"expected_version": 1, "new_value": 50}, format="json"
    )
    response = planner.post(
        "/api/shards/plan/commit",
        {"expected_version": 1, "new_value": "lavish", "read_set": {"budget": 1, "plan": 1}},
        format="json",
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "READ_SET_STALE"
    assert error["stale"] == [{"shard_id": "budget", "read_version": 1, "current_version": 2}]
    shard = planner.get("/api/shards/plan").json()
    assert (shard["value"], shard["version"]) == ("cheap", 1)


def test_a_commit_whose_read_set_is_current_applies(planner):
    create(planner, "budget", initial_value=100)
    create(planner, "plan", initial_value="cheap")
    response = planner.post(
        "/api/shards/plan/commit",
        {"expected_version": 1, "new_value": "lavish", "read_set": {"budget": 1}},
        format="json",
    )
    assert response.status_code == 200


def test_a_read_set_naming_a_missing_shard_is_stale(planner):
    create(planner, "plan")
    response = planner.post(
        "/api/shards/plan/commit",
        {"expected_version": 1, "new_value": "x", "read_set": {"ghost": 3}},
        format="json",
    )
    assert response.status_code == 409
    assert response.json()["error"]["stale"] == [
        {"shard_id": "ghost", "read_version": 3, "current_version": None}
    ]


def test_a_read_set_outside_the_keys_scopes_is_refused_before_those_shards_are_read(
    planner, make_key, client_for
):
    create(planner, "team.plan", initial_value="cheap")
    create(planner, "other.budget", initial_value=100)
    planner.post(
        "/api/shards/other.budget/commit", {"expected_version": 1, "new_value": 50}, format="json"
    )
    scoped = client_for(
        make_key("shard:read", "shard:write", shard_prefixes=["team."]), agent="scoped"
    )
    body = {
        "expected_version": 1,
        "new_value": "lavish",
        "read_set": {"team.plan": 1, "other.budget": 1, "other.ghost": 3},
    }
    with CaptureQueriesContext(connection) as queries:
        response = scoped.post("/api/shards/team.plan/commit", body, format="json")
    assert response.status_code == 403
    error = response.json()["error"]
    assert (error["code"], error["permission"]) == ("PERMISSION_DENIED", "shard scope")
    assert error["shard_ids"] == ["other.budget", "other.ghost"]
    assert "stale" not in error and "current_version" not in str(error)
    assert not [q["sql"] for q in queries if "other." in q["sql"]]
    assert planner.get("/api/shards/team.plan").json()["version"] == 1


def test_a_commit_outside_the_schema_is_a_schema_violation_and_writes_nothing(planner):
    create(planner, value_schema={"type": "object", "required": ["db"]}, initial_value={"db": "pg"})
    response = planner.post(
        "/api/shards/db_schema_choice/commit",
        {"expected_version": 1, "new_value": {"database": "pg"}},
        format="json",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "SCHEMA_VIOLATION"
    assert "'db' is a required property" in error["message"]
    assert planner.get("/api/shards/db_schema_choice").json()["version"] == 1


def test_an_irreversible_shard_refuses_direct_commits(planner):
    create(planner, "transactions", reversible=False, initial_value={"balance": 100000})
    response = planner.post(
        "/api/shards/transactions/commit",
        {"expected_version": 1, "new_value": {"balance": 50000}},
        format="json",
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "APPROVAL_REQUIRED"
    with_unknown_approval = planner.post(
        "/api/shards/transactions/commit",
        {"expected_version": 1, "new_value": {"balance": 0}, "approval_id": "made-up"},
        format="json",
    )
    assert with_unknown_approval.status_code == 403
    assert with_unknown_approval.json()["error"]["code"] == "APPROVAL_INVALID"
    assert planner.get("/api/shards/transactions").json()["value"] == {"balance": 100000}


def test_an_owners_only_shard_refuses_commits_from_other_agents(planner, make_key, client_for):
    create(planner, "roadmap", owner_policy="owners-only", owners=["planner-1"])
    outsider = client_for(make_key("shard:read", "shard:write"), agent="intruder")
    response = outsider.post(
        "/api/shards/roadmap/commit", {"expected_version": 1, "new_value": "mine"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "NOT_AN_OWNER"
    ok = planner.post(
        "/api/shards/roadmap/commit", {"expected_version": 1, "new_value": "ours"}, format="json"
    )
    assert ok.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"new_value": 1},
        {"expected_version": 1},
        {"expected_version": 0, "new_value": 1},
        {"expected_version": "one", "new_value": 1},
        {"expected_version": 1.5, "new_value": 1},
        {"expected_version": 1, "new_value": 1, "read_set": ["a"]},
        {"expected_version": 1, "new_value": 1, "read_set": {"a": "x"}},
        {"expected_version": 1, "new_value": 1, "read_set": {"bad id": 1}},
        [1, 2],
    ],
)
def test_malformed_commits_get_validation_error_and_write_nothing(planner, body):
    create(planner)
    response = planner.post("/api/shards/db_schema_choice/commit", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"
    assert planner.get("/api/shards/db_schema_choice").json()["version"] == 1


def test_null_is_a_value_a_commit_can_set(planner):
    create(planner)
    response = planner.post(
        "/api/shards/db_schema_choice/commit",
        {"expected_version": 1, "new_value": None},
        format="json",
    )
    assert response.status_code == 200
    assert planner.get("/api/shards/db_schema_choice").json()["value"] is None


def test_history_lists_every_applied_version_with_who_and_value(planner):
    create(planner)
    planner.post(
        "/api/shards/db_schema_choice/commit",
        {"expected_version": 1, "new_value": "dynamodb"},
        format="json",
    )
    planner.post(
        "/api/shards/db_schema_choice/commit",
        {"expected_version": 1, "new_value": "lost"},
        format="json",
    )
    history = planner.get("/api/shards/db_schema_choice/history").json()
    assert [(h["version"], h["value"], h["agent_id"]) for h in history] == [
        (1, "postgres", "planner-1"),
        (2, "dynamodb", "planner-1"),
    ]


def test_the_list_filters_by_type_and_prefix_and_pages(planner):
    for n in range(5):
        create(planner, f"team.a.{n}")
    create(planner, "team.b.0")
    first = planner.get("/api/shards?prefix=team.a.&limit=2&type=decision").json()
    assert [s["id"] for s in first["results"]] == ["team.a.0", "team.a.1"]
    seen = [s["id"] for s in first["results"]]
    page = first
    while page["next"]:
        page = planner.get(page["next"]).json()
        seen += [s["id"] for s in page["results"]]
    assert seen == [f"team.a.{n}" for n in range(5)]
    assert planner.get("/api/shards?type=additive").json() == {"results": [], "next": None}
    bad = planner.get("/api/shards?type=ledger")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "VALIDATION_ERROR"


def test_only_an_admin_key_deletes_a_shard_and_the_deletion_is_audited(planner, admin):
    create(planner)
    refused = planner.delete("/api/shards/db_schema_choice")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "PERMISSION_DENIED"
    assert admin.delete("/api/shards/db_schema_choice").status_code == 204
    assert planner.get("/api/shards/db_schema_choice").status_code == 404
    audit = admin.get("/api/audit?shard_id=db_schema_choice&action=shard.delete").json()
    assert len(audit) == 1
    assert audit[0]["agent_id"] == "admin-1"
    assert admin.delete("/api/shards/db_schema_choice").status_code == 404


def test_a_recreated_shard_starts_a_fresh_history(planner, admin):
    create(planner)
    planner.post(
        "/api/shards/db_schema_choice/commit",
        {"expected_version": 1, "new_value": "dynamodb"},
        format="json",
    )
    admin.delete("/api/shards/db_schema_choice")
    create(planner, initial_value="sqlite")
    history = planner.get("/api/shards/db_schema_choice/history").json()
    assert [(h["version"], h["value"]) for h in history] == [(1, "sqlite")]
