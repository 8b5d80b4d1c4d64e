"""Idempotency-Key: a retried write applies once."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from access.identity import Actor
from access.keys import prefix_of
from access.models import ApiKey
from access.services import api_key_create, api_key_revoke
from coordination.models import IdempotencyRecord
from shards.models import Shard
from shards.services import shard_create

pytestmark = pytest.mark.django_db


def commit(client, key, version=1, value=2):
    return client.post(
        "/api/shards/counter/commit",
        {"expected_version": version, "new_value": value},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


@pytest.fixture
def counter(planner):
    planner.post(
        "/api/shards", {"id": "counter", "type": "decision", "initial_value": 1}, format="json"
    )


def test_the_same_key_and_body_replays_the_stored_response(planner, counter):
    first = commit(planner, "retry-1")
    again = commit(planner, "retry-1")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Shard.objects.get(pk="counter").version == 2


def test_the_same_key_with_another_body_is_refused(planner, counter):
    commit(planner, "retry-2")
    other = commit(planner, "retry-2", value=3)
    assert (other.status_code, other.json()["error"]["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")


def test_a_refusal_is_replayed_too_and_keys_are_per_api_key(planner, counter, make_key, client_for):
    commit(planner, "k")
    stale = commit(planner, "stale-1", version=1, value=9)
    assert stale.status_code == 409
    assert commit(planner, "stale-1", version=1, value=9).json() == stale.json()
    other_key = client_for(make_key("shard:read", "shard:write"), agent="other")
    fresh = commit(other_key, "k", version=2, value=5)  # same key string, another API key
    assert fresh.status_code == 200 and "Idempotent-Replayed" not in fresh


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_client_that_lost_the_response_retries_and_it_applies_once(live_server_url):
    shard_create(actor=Actor("x"), shard_id="ledger", shard_type="decision", initial_value=[])
    _, key = api_key_create(name="k", permissions=["shard:read", "shard:write"])
    body = json.dumps({"expected_version": 1, "new_value": ["paid"]}).encode()
    url = urlsplit(live_server_url)
    request = (
        b"POST /api/shards/ledger/commit HTTP/1.1\r\n"
        + f"Host: {url.netloc}\r\nX-API-Key: {key}\r\nX-Agent-Id: payer\r\n".encode()
        + b"Idempotency-Key: pay-42\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with socket.create_connection((url.hostname, url.port)) as raw:
        raw.sendall(request)
    # The connection is gone before any response was read: the client must retry.
    headers = {"X-API-Key": key, "X-Agent-Id": "payer", "Idempotency-Key": "pay-42"}
    for _ in range(50):
        retry = httpx.post(
            f"{live_server_url}/api/shards/ledger/commit",
            content=body,
            headers={**headers, "Content-Type": "application/json"},
        )
        if retry.status_code != 409 or retry.json()["error"]["code"] != "IDEMPOTENCY_IN_PROGRESS":
            break
        time.sleep(0.1)
    assert retry.status_code == 200, retry.text
    assert retry.headers["Idempotent-Replayed"] == "true"
    shard = Shard.objects.get(pk="ledger")
    assert (shard.version, shard.value) == (2, ["paid"])


def test_a_request_that_fails_authentication_is_neither_stored_nor_replayed(
    planner, counter, client_for
):
    bogus = client_for("zl_nothere.not-a-real-secret", agent="planner-1")
    refused = commit(bogus, "auth-1")
    assert refused.status_code == 401
    assert not IdempotencyRecord.objects.exists()
    again = commit(bogus, "auth-1")
    assert again.status_code == 401 and "Idempotent-Replayed" not in again


def test_a_revoked_key_retrying_gets_401_and_not_the_stored_answer(make_key, client_for, counter):
    raw = make_key("shard:read", "shard:write")
    agent = client_for(raw, agent="planner-1")
    assert commit(agent, "revoked-1").status_code == 200
    api_key_revoke(key=ApiKey.objects.get(prefix=prefix_of(raw)), revoked_by="test")
    retry = commit(agent, "revoked-1")
    assert (retry.status_code, retry.json()["error"]["code"]) == (401, "KEY_REVOKED")
    assert "Idempotent-Replayed" not in retry


def test_another_agent_of_the_same_key_with_the_same_idempotency_key_is_its_own_request(
    make_key, client_for, counter
):
    raw = make_key("shard:read", "shard:write")
    first, second = client_for(raw, agent="agent-a"), client_for(raw, agent="agent-b")
    assert commit(first, "step-1").status_code == 200
    # The same header value and body from another agent: applied as its own
    # request (here it is stale), not answered with agent-a's success.
    same = commit(second, "step-1")
    assert (same.status_code, same.json()["error"]["code"]) == (409, "STALE_VERSION")
    assert "Idempotent-Replayed" not in same
    # And another body is not "reused": it is agent-b's own first use of the key.
    other = commit(second, "step-2", version=2, value=3)
    assert other.status_code == 200 and "Idempotent-Replayed" not in other
    assert commit(first, "step-2", version=2, value=3).status_code == 409
    assert Shard.objects.get(pk="counter").version == 3
