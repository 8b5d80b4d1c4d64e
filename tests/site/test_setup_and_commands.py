"""The pieces a new user meets first: bootstrap, createapikey, health, the docs."""

import os
import re
import subprocess
import sys

import pytest
from django.core.management import call_command

from access.keys import hash_secret
from access.models import ApiKey
from shards.models import Delivery
from shards.tasks import prune_delivery_log

pytestmark = pytest.mark.django_db


def test_createapikey_prints_the_raw_key_last_and_stores_only_its_hash(capsys, client_for):
    call_command(
        "createapikey", "worker", "--permissions", "shard:read,shard:write", "--agent", "w-1"
    )
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"zl_[0-9a-f]{8}\.[A-Za-z0-9_-]{40,}", raw)
    key = ApiKey.objects.get(name="worker")
    secret = raw.split(".", 1)[1]
    assert key.hashed_key == hash_secret(secret)
    assert secret not in str(ApiKey.objects.filter(pk=key.pk).values().first())
    assert key.permissions == ["shard:read", "shard:write"]
    assert key.agent_ids == ["w-1"]
    assert client_for(raw, agent="w-1").get("/api/shards").status_code == 200


def test_createapikey_rejects_unknown_permissions():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="shard:fly"):
        call_command("createapikey", "bad", "--permissions", "shard:fly")


def test_bootstrap_prints_an_admin_login_and_key_once_then_never_again(capsys, client_for):
    call_command("bootstrap")
    first = capsys.readouterr().out
    raw = re.search(r"(zl_\S+)", first).group(1)
    assert re.search(r"admin / \S+", first)
    assert client_for(raw, agent="admin").get("/api/audit").status_code == 200
    call_command("bootstrap")
    second = capsys.readouterr().out
    assert "zl_" not in second and "already bootstrapped" in second


def test_health_reports_database_channel_layer_and_broker(client):
    from supervision.heartbeats import heartbeat_record
    from supervision.models import Role

    heartbeat_record(role=Role.WORKER)
    heartbeat_record(role=Role.BEAT)
    response = client.get("/api/health")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["checks"]) == (
        "ok",
        {"database": "ok", "channel_layer": "ok", "broker": "ok", "worker": "ok", "beat": "ok"},
    )


def test_the_openapi_schema_describes_every_contract_path(client):
    response = client.get("/api/schema?format=json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/api/shards",
        "/api/shards/{shard_id}",
        "/api/shards/{shard_id}/commit",
        "/api/shards/{shard_id}/claim",
        "/api/shards/{shard_id}/history",
        "/api/txn",
        "/api/audit",
        "/api/health",
    ):
        assert path in paths
    # The writes that answer with a value take Prefer: return=minimal and say so.
    for path in ("/api/shards/{shard_id}/commit", "/api/shards/{shard_id}/claim", "/api/txn"):
        operation = paths[path]["post"]
        assert "Prefer" in {p["name"] for p in operation["parameters"] if p["in"] == "header"}
        assert "Preference-Applied" in operation["responses"]["200"]["headers"]
    assert response.json()["components"]["securitySchemes"]["ApiKeyAuth"]["name"] == "X-API-Key"


def test_the_openapi_schema_says_which_bodies_and_ids_the_server_refuses(client):
    """The quick half of tests/site/test_api_fuzz.py's positive_data_acceptance."""
    document = client.get("/api/schema?format=json").json()
    schemas, paths = document["components"]["schemas"], document["paths"]
    for closed in (
        "ApprovalRequest",
        "ApprovalDecisionRequest",
        "ChangesRequest",
        "Rejection",
        "Claim",
        "Txn",
    ):
        assert schemas[closed]["additionalProperties"] is False, closed
    for open_body in ("ShardCreate", "Commit", "LeaseRequest"):
        assert schemas[open_body]["additionalProperties"] == {
            "$ref": "#/components/schemas/JsonValue"
        }
    assert schemas["LeaseRequest"]["required"] == ["ttl_seconds"]
    assert schemas["Rejection"]["required"] == ["reason"]
    assert paths["/api/txn"]["post"]["requestBody"]["required"] is True
    assert schemas["Commit"]["properties"]["approval_id"]["pattern"] == "^[^\\u0000]+$"
    assert "allOf" in schemas["ShardCreate"]
    # Ids in paths have their formats: "x/commit" or "request" is none of them.
    for path, name in (
        ("/api/shards/{shard_id}", "shard_id"),
        ("/api/leases/{lease_id}", "lease_id"),
        ("/api/approvals/{approval_id}", "approval_id"),
    ):
        for operation in paths[path].values():
            (parameter,) = [p for p in operation["parameters"] if p["name"] == name]
            assert "/" not in parameter["schema"]["pattern"], path
    # GET /api/approvals/request is the one 405 a documented path can reach.
    assert "405" in paths["/api/approvals/{approval_id}"]["get"]["responses"]


def test_the_docs_page_loads_nothing_from_the_internet(client):
    response = client.get("/api/docs")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    assert not re.search(r"""(src|href)=["']https?://""", html)


def test_the_delivery_log_pruning_task_removes_only_old_rows(settings):
    import time_machine

    settings.ZEROLOCK_DELIVERY_RETENTION_DAYS = 30
    with time_machine.travel("2026-01-01 12:00Z"):
        Delivery.objects.create(agent_id="a", shard_id="s", version=1)
    with time_machine.travel("2026-03-01 12:00Z"):
        Delivery.objects.create(agent_id="a", shard_id="s", version=2)
        assert prune_delivery_log.apply().get() == 1
    assert list(Delivery.objects.values_list("version", flat=True)) == [2]


@pytest.mark.parametrize(
    "setting", ["ZEROLOCK_LOGIN_FAILURE_LIMIT", "ZEROLOCK_LOGIN_COOLOFF_SECONDS"]
)
def test_a_login_limit_or_cool_down_of_zero_stops_the_server_from_starting(setting):
    # 0 would mean nobody signs in (limit) or nobody is ever locked (cool-down).
    from tests.conftest import ROOT

    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=os.environ | {setting: "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "must be at least 1" in done.stderr, done.stderr
