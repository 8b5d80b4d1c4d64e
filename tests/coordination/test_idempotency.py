"""Idempotency-Key: a retried write applies once."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from access.auth import Actor
from access.services import api_key_create
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
