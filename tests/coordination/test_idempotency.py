"""Idempotency-Key: a retried write applies once."""

from __future__ import annotations

import json
import socket
import time
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
import pytest
import time_machine
from django.http import HttpResponse
from django.utils import timezone

from access.identity import Actor
from access.keys import prefix_of
from access.models import ApiKey
from access.services import api_key_create, api_key_revoke
from audit.models import AuditEntry
from common.applied import applied_marking
from common.errors import ApiError
from coordination.idempotency import (
    Reserved,
    applied_fence,
    idempotency_reserve,
    idempotency_store,
)
from coordination.models import IdempotencyRecord
from shards.models import Shard
from shards.services import shard_commit, shard_create

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


# --- a key whose holder died: taken over, and fenced --------------------------------
# What a server killed between its write and its answer leaves is a reservation
# (``idempotency_reserve``) whose answer is never stored (``idempotency_store``);
# these tests make that
# state with the middleware's own steps, on the real database and the real write
# path (group commit's leader included: transaction=True).

SCOPE, DIGEST = "s" * 64, "d" * 64


def _reserve(key: str):
    return idempotency_reserve(SCOPE, key, DIGEST)


def _commit_under(reserved, *, version: int, value: int):
    with applied_marking(applied_fence(reserved.record_id, reserved.holder)):
        return shard_commit(
            actor=Actor("planner-1"),
            shard=Shard.objects.get(pk="ledger"),
            expected_version=version,
            new_value=value,
        )


@pytest.fixture
def ledger():
    shard_create(
        actor=Actor("planner-1"), shard_id="ledger", shard_type="decision", initial_value=0
    )


def _code(response) -> tuple[int, str]:
    return response.status_code, json.loads(response.content)["error"]["code"]


@pytest.mark.django_db(transaction=True)
def test_a_write_marks_its_key_applied_in_its_own_transaction_and_a_refusal_does_not(ledger):
    taken = _reserve("write-1")
    _commit_under(taken, version=1, value=1)
    assert IdempotencyRecord.objects.get(pk=taken.record_id).applied

    refused = _reserve("stale-1")
    with pytest.raises(ApiError):
        _commit_under(refused, version=1, value=9)
    assert not IdempotencyRecord.objects.get(pk=refused.record_id).applied

    # A refusal audited before the write lock (an owner's rule) writes its record
    # in a transaction of its own, which is not the request's write either.
    shard_create(
        actor=Actor("owner-1"),
        shard_id="owned",
        shard_type="decision",
        initial_value=0,
        owner_policy="owners-only",
        owners=["owner-1"],
    )
    not_owner = _reserve("owned-1")
    entries = AuditEntry.objects.count()
    with (
        pytest.raises(ApiError),
        applied_marking(applied_fence(not_owner.record_id, not_owner.holder)),
    ):
        shard_commit(
            actor=Actor("planner-1"),
            shard=Shard.objects.get(pk="owned"),
            expected_version=1,
            new_value=1,
        )
    assert AuditEntry.objects.count() == entries + 1  # the refusal, audited
    assert not IdempotencyRecord.objects.get(pk=not_owner.record_id).applied


@pytest.mark.django_db(transaction=True)
def test_a_key_held_past_the_takeover_time_passes_to_its_retry_and_the_dead_copy_can_no_longer_apply(
    ledger, settings
):
    settings.ZEROLOCK_IDEMPOTENCY_TAKEOVER_SECONDS = 10
    with time_machine.travel(timezone.now(), tick=False) as clock:
        killed = _reserve("pay-1")
        assert _code(_reserve("pay-1")) == (409, "IDEMPOTENCY_IN_PROGRESS")  # still young
        clock.shift(11)
        retry = _reserve("pay-1")
        assert isinstance(retry, Reserved) and retry.holder != killed.holder
        # A third copy meets the retry's fresh reservation.
        assert _code(_reserve("pay-1")) == (409, "IDEMPOTENCY_IN_PROGRESS")

    # The copy it was taken from turns out to be alive: its write is refused and
    # rolled back whole, and the retry's goes in, once.
    entries = AuditEntry.objects.count()
    with pytest.raises(ApiError) as refused:
        _commit_under(killed, version=1, value=1)
    assert refused.value.code == "IDEMPOTENCY_IN_PROGRESS"
    assert Shard.objects.get(pk="ledger").version == 1
    assert AuditEntry.objects.count() == entries
    _commit_under(retry, version=1, value=1)
    assert Shard.objects.get(pk="ledger").version == 2
    assert IdempotencyRecord.objects.get(pk=retry.record_id).applied


@pytest.mark.django_db(transaction=True)
def test_a_retry_of_a_write_that_went_in_but_lost_its_answer_is_told_so_and_not_run_again(
    ledger, settings
):
    settings.ZEROLOCK_IDEMPOTENCY_TAKEOVER_SECONDS = 10
    with time_machine.travel(timezone.now(), tick=False) as clock:
        killed = _reserve("pay-2")
        _commit_under(killed, version=1, value=1)  # in; then the process died
        clock.shift(11)
        told = _reserve("pay-2")
        again = _reserve("pay-2")
    assert _code(told) == (409, "IDEMPOTENCY_ANSWER_LOST")
    assert _code(again) == (409, "IDEMPOTENCY_ANSWER_LOST")
    assert again["Idempotent-Replayed"] == "true"
    assert Shard.objects.get(pk="ledger").version == 2


@pytest.mark.django_db(transaction=True)
def test_a_5xx_after_the_write_went_in_is_kept_as_answer_lost_but_one_before_it_lets_the_retry_run(
    ledger,
):
    applied = _reserve("pay-3")
    _commit_under(applied, version=1, value=1)
    idempotency_store(applied, HttpResponse(status=500))
    assert _code(_reserve("pay-3")) == (409, "IDEMPOTENCY_ANSWER_LOST")

    nothing = _reserve("pay-4")
    idempotency_store(nothing, HttpResponse(status=503))
    assert isinstance(_reserve("pay-4"), Reserved)  # reserved afresh: the retry runs


@pytest.mark.django_db(transaction=True)
def test_a_key_is_free_again_a_day_after_its_answer_and_only_then():
    with time_machine.travel(timezone.now(), tick=False) as clock:
        first = _reserve("nightly-1")
        assert isinstance(first, Reserved)
        idempotency_store(first, HttpResponse(b'{"n": 1}', status=200))
        clock.shift(timedelta(hours=23))
        replay = _reserve("nightly-1")
        assert isinstance(replay, HttpResponse) and replay["Idempotent-Replayed"] == "true"
        assert replay.content == b'{"n": 1}'
        clock.shift(timedelta(hours=2))  # past its 24 hours: a new request of the key
        again = _reserve("nightly-1")
        assert isinstance(again, Reserved) and again.record_id != first.record_id
        assert IdempotencyRecord.objects.filter(scope=SCOPE, key="nightly-1").count() == 1
