"""Agents cannot act beyond their key: every endpoint against every kind of key."""

import logging
import random
from datetime import datetime, timedelta

import httpx
import pytest
import time_machine
from django.utils import timezone

from access.models import ApiKey
from access.services import api_key_create, api_key_revoke, api_key_update
from audit.models import AuditEntry
from shards.models import Shard

pytestmark = pytest.mark.django_db

# (method, path, body, permission it needs, status on success)
ENDPOINTS = [
    ("get", "/api/shards", None, "shard:read", 200),
    ("post", "/api/shards", {"id": "team.new", "type": "decision"}, "shard:create", 201),
    ("get", "/api/shards/team.plan", None, "shard:read", 200),
    (
        "post",
        "/api/shards/team.plan/commit",
        {"expected_version": 1, "new_value": 2},
        "shard:write",
        200,
    ),
    ("get", "/api/shards/team.plan/history", None, "shard:read", 200),
    ("delete", "/api/shards/team.plan", None, "admin", 204),
    ("get", "/api/audit", None, "admin", 200),
]


@pytest.fixture
def plan_shard(db):
    api_key_create(name="setup", permissions=["admin"])
    Shard.objects.create(id="team.plan", type="decision", value=1, created_by="x", updated_by="x")
    Shard.objects.create(id="other.plan", type="decision", value=1, created_by="x", updated_by="x")


def call(client, method, path, body):
    return (
        getattr(client, method)(path, body, format="json")
        if body
        else getattr(client, method)(path)
    )


def key_case(case, permission):
    """Returns (raw key or None, agent id) for one row of the matrix."""
    if case == "no key":
        return None, "agent-1"
    if case == "wrong key":
        _, raw = api_key_create(name=case, permissions=[permission])
        return raw[:-4] + "AAAA", "agent-1"
    others = [p for p in ("shard:read", "shard:write", "shard:create", "admin") if p != permission]
    grants = {"lacking": [p for p in others if p != "admin"]}.get(case, [permission])
    _, raw = api_key_create(
        name=case,
        permissions=grants,
        agent_ids=["agent-1"],
        shard_prefixes=["team."] if case != "out of scope" else ["elsewhere."],
    )
    key = ApiKey.objects.get(name=case)
    if case == "expired":
        key.expires_at = timezone.now() - timedelta(seconds=1)
    if case == "revoked":
        key.revoked = True
    key.save()
    return raw, "agent-2" if case == "impersonated agent" else "agent-1"


EXPECTED = {
    "no key": (401, "UNAUTHENTICATED"),
    "wrong key": (401, "UNAUTHENTICATED"),
    "expired": (401, "KEY_EXPIRED"),
    "revoked": (401, "KEY_REVOKED"),
    "lacking": (403, "PERMISSION_DENIED"),
    "impersonated agent": (403, "AGENT_NOT_ALLOWED"),
    "out of scope": (403, "PERMISSION_DENIED"),
    "with it": (None, None),
}


@pytest.mark.parametrize("case", list(EXPECTED))
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[f"{m.upper()} {p}" for m, p, *_ in ENDPOINTS])
def test_every_endpoint_answers_every_kind_of_key_exactly(plan_shard, client_for, endpoint, case):
    method, path, body, permission, ok_status = endpoint
    raw, agent = key_case(case, permission)
    response = call(client_for(raw, agent=agent), method, path, body)
    status, code = EXPECTED[case]
    if case == "out of scope" and path == "/api/audit":
        status, code = None, None  # the audit log is not a shard: scopes do not apply
    if case == "out of scope" and path == "/api/shards" and method == "get":
        # A scoped key's listing is filtered rather than refused.
        assert response.status_code == 200
        assert response.json()["results"] == []
        return
    if status is None:
        assert response.status_code == ok_status, response.content
        return
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code


def test_a_scoped_key_lists_only_its_shards(plan_shard, client_for):
    _, raw = api_key_create(name="scoped", permissions=["shard:read"], shard_prefixes=["team."])
    listed = client_for(raw).get("/api/shards").json()["results"]
    assert [s["id"] for s in listed] == ["team.plan"]


def test_a_scoped_key_cannot_create_outside_its_scope(plan_shard, client_for):
    _, raw = api_key_create(name="scoped", permissions=["shard:create"], shard_prefixes=["team."])
    response = client_for(raw).post(
        "/api/shards", {"id": "ops.x", "type": "decision"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "PERMISSION_DENIED"


# --- rate limits -----------------------------------------------------------


def fresh_window() -> datetime:
    """A moment one second into a minute nobody has used (counts live in the cache)."""
    return datetime(2031, 1, 1) + timedelta(minutes=random.randint(0, 10**7), seconds=1)


def test_the_thousand_and_first_request_in_a_minute_is_rate_limited(client_for, settings):
    settings.ZEROLOCK_RATE_LIMIT_PER_MINUTE = 1000
    _, raw = api_key_create(name="busy", permissions=["shard:read"])
    agent = client_for(raw)
    with time_machine.travel(fresh_window(), tick=False):
        for n in range(1000):
            response = agent.get("/api/shards/none")
            assert response.status_code == 404
            assert response["X-RateLimit-Remaining"] == str(999 - n)
        refused = agent.get("/api/shards/none")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "RATE_LIMITED"
    assert refused["X-RateLimit-Limit"] == "1000"
    assert refused["X-RateLimit-Remaining"] == "0"
    assert 59 <= int(refused["Retry-After"]) <= 120


def test_the_window_slides_and_refused_requests_do_not_count(client_for, settings):
    settings.ZEROLOCK_RATE_LIMIT_PER_MINUTE = 10
    _, raw = api_key_create(name="slider", permissions=["shard:read"])
    agent = client_for(raw)
    start = fresh_window()
    with time_machine.travel(start, tick=False) as clock:
        assert all(agent.get("/api/shards").status_code == 200 for _ in range(10))
        assert agent.get("/api/shards").status_code == 429
        assert agent.get("/api/shards").status_code == 429
        clock.move_to(start + timedelta(seconds=59 + 30))  # half of the old minute still counts
        statuses = [agent.get("/api/shards").status_code for _ in range(10)]
        assert statuses == [200] * 5 + [429] * 5
        clock.move_to(start + timedelta(seconds=59 + 61))  # the busy minute is out of the window
        assert all(agent.get("/api/shards").status_code == 200 for _ in range(5))


def test_a_key_with_its_own_limit_uses_it(client_for, settings):
    settings.ZEROLOCK_RATE_LIMIT_PER_MINUTE = 1000
    _, raw = api_key_create(name="throttled", permissions=["shard:read"], rate_limit=3)
    agent = client_for(raw)
    with time_machine.travel(fresh_window(), tick=False):
        assert [agent.get("/api/shards").status_code for _ in range(4)] == [200, 200, 200, 429]


def test_one_client_address_is_limited_whatever_key_it_uses(client_for, settings):
    settings.ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE = 4
    with time_machine.travel(fresh_window(), tick=False):
        statuses = [
            client_for(None, agent=None).get("/api/shards", REMOTE_ADDR="10.9.8.7").status_code
            for _ in range(5)
        ]
    assert statuses == [401, 401, 401, 401, 429]


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_two_server_processes_on_redis_share_one_count(transactional_db):
    import os

    from tests.conftest import server_env, start_server, stop_server

    _, raw = api_key_create(name="shared", permissions=["shard:read"], rate_limit=30)
    env = server_env()
    env["REDIS_URL"] = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    env["ZEROLOCK_RATE_LIMIT_PER_MINUTE"] = "1000"
    servers = [start_server(env), start_server(env)]
    try:
        statuses = []
        for n in range(40):
            _, url = servers[n % 2]
            statuses.append(httpx.get(f"{url}/api/shards", headers={"X-API-Key": raw}).status_code)
    finally:
        for proc, _ in servers:
            stop_server(proc)
    # Alternating between the two processes, 30 pass in all, not 30 each.
    assert statuses == [200] * 30 + [429] * 10


# --- key changes and secrets ----------------------------------------------------


def test_key_changes_and_revocation_are_audited_with_before_and_after(db):
    key, _ = api_key_create(name="ops", permissions=["shard:read"], created_by="admin")
    api_key_update(key=key, changed_by="admin", permissions=["shard:read", "shard:write"])
    api_key_revoke(key=key, revoked_by="admin")
    api_key_revoke(key=key, revoked_by="admin")
    actions = list(
        AuditEntry.objects.filter(key_prefix=key.prefix).values_list("action", flat=True)
    )
    assert actions == ["key.create", "key.change", "key.revoke"]
    change = AuditEntry.objects.get(action="key.change")
    assert change.details["changes"]["permissions"] == {
        "from": ["shard:read"],
        "to": ["shard:read", "shard:write"],
    }


def test_raw_keys_never_reach_the_database_or_the_logs(client_for, caplog):
    caplog.set_level(logging.DEBUG)
    key, raw = api_key_create(name="secretive", permissions=["shard:read"])
    secret = raw.split(".", 1)[1]
    client_for(raw).get("/api/shards")
    client_for(raw[:-2] + "zz").get("/api/shards")
    client_for(raw).get("/api/no/such/path")
    assert secret not in caplog.text
    assert secret[:-2] not in caplog.text
    for row in ApiKey.objects.values():
        assert secret not in str(row)
    for row in AuditEntry.objects.values():
        assert secret not in str(row)
