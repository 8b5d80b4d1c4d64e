"""Finding 8: refused commits missing from the audit. One stale commit carrying
``expected_version = 2**63`` overflowed the batched insert of refusals, and the
whole 0.2 s batch of honest refusals was dropped with it."""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest
from django.core.management import call_command

from access.services import api_key_create
from audit.chain import verify_chain
from audit.models import AuditAction, AuditEntry
from audit.rejections import DROPPED_COUNTER, RejectionRecorder, rejection_entry
from metrics.models import MetricCounter

HONEST = 12


def _honest(shard_id: str, n: int) -> dict:
    return rejection_entry(
        agent_id=f"honest-{n}",
        key_prefix="abcd1234",
        shard_id=shard_id,
        expected=n + 1,
        code="STALE_VERSION",
    )


def _refusals(shard_id: str):
    return AuditEntry.objects.filter(action=AuditAction.SHARD_COMMIT_REJECTED, shard_id=shard_id)


def _chain_intact() -> None:
    checked, broken = verify_chain()
    assert broken is None, broken
    assert checked > 0
    call_command("verify_audit")  # the command operators run, same function


@pytest.mark.django_db(transaction=True)
def test_a_record_that_cannot_be_stored_loses_only_itself_not_its_batch(caplog):
    """The batch fails as a whole, then is written row by row: the poisoned row
    (put on the batch raw, as a check nobody foresaw would let through) is
    logged and counted, the honest ones are all there and the chain holds."""
    recorder = RejectionRecorder()
    honest = [_honest("mallory.batch", n) for n in range(HONEST)]
    poisoned = {**_honest("mallory.batch", 99), "agent_id": "mallory", "version_before": 2**63}
    batch = honest[:5] + [poisoned] + honest[5:]

    written = recorder.write_batch(batch)

    assert written == HONEST
    assert sorted(_refusals("mallory.batch").values_list("agent_id", flat=True)) == sorted(
        e["agent_id"] for e in honest
    )
    assert recorder.dropped == 1
    assert MetricCounter.objects.get(name=DROPPED_COUNTER).value == 1
    assert "Dropped the audit record of a refused commit" in caplog.text
    assert str(2**63) not in caplog.text  # names and the error type, never values
    _chain_intact()


@pytest.mark.django_db(transaction=True)
def test_an_expected_version_of_2_63_is_made_storable_before_it_is_queued():
    recorder = RejectionRecorder()
    entry = rejection_entry(
        agent_id="mallory",
        key_prefix="abcd1234",
        shard_id="mallory.queued",
        expected=2**63,
        code="STALE_VERSION",
    )
    assert entry["version_before"] is None
    assert entry["details"] == {"code": "STALE_VERSION", "expected_version_out_of_range": True}

    assert recorder.write_batch([_honest("mallory.queued", n) for n in range(3)] + [entry]) == 4
    assert recorder.dropped == 0
    stored = _refusals("mallory.queued").get(agent_id="mallory")
    assert stored.version_before is None
    assert stored.details["expected_version_out_of_range"] is True
    _chain_intact()


@pytest.mark.django_db(transaction=True)
def test_text_no_backend_can_store_is_cleaned_before_it_is_queued():
    """NUL (PostgreSQL refuses it), a lone surrogate (not UTF-8) and overlong ids."""
    entry = rejection_entry(
        agent_id="mal\x00lory\ud800" + "x" * 300,
        key_prefix="k" * 40,
        shard_id="s\x00" * 200,
        expected=-(2**64),
        code="STALE_VERSION",
    )
    assert RejectionRecorder().write_batch([entry]) == 1
    stored = AuditEntry.objects.get(action=AuditAction.SHARD_COMMIT_REJECTED)
    assert stored.agent_id.startswith("mallory?")
    assert len(stored.agent_id) == 128 and len(stored.key_prefix) == 16
    assert "\x00" not in stored.shard_id
    _chain_intact()


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_honest_refusals_sent_with_a_2_63_commit_all_reach_the_audit(live_server_url):
    """The issue's repro over real sockets: honest stale commits and Mallory's
    ``expected_version = 2**63`` in the same 0.2 s batch window of the server."""
    _, raw = api_key_create(name="rej", permissions=["shard:read", "shard:write", "shard:create"])
    shard_id = f"stale-{uuid.uuid4().hex[:8]}"
    headers = {"X-API-Key": raw, "X-Agent-Id": "setup"}
    url = live_server_url
    assert (
        httpx.post(
            f"{url}/api/shards",
            json={"id": shard_id, "type": "decision", "initial_value": 0},
            headers=headers,
        ).status_code
        == 201
    )
    for version in (1, 2, 3):
        response = httpx.post(
            f"{url}/api/shards/{shard_id}/commit",
            json={"expected_version": version, "new_value": version},
            headers=headers,
        )
        assert response.status_code == 200, response.text
    statuses: dict[str, int] = {}
    start = threading.Barrier(HONEST + 1)

    def send(agent: str, expected: int) -> None:
        start.wait()
        statuses[agent] = httpx.post(
            f"{url}/api/shards/{shard_id}/commit",
            json={"expected_version": expected, "new_value": agent},
            headers={"X-API-Key": raw, "X-Agent-Id": agent},
            timeout=30,
        ).status_code

    threads = [
        threading.Thread(target=send, args=(f"honest-{n}", 1 + n % 3)) for n in range(HONEST)
    ]
    threads.append(threading.Thread(target=send, args=("mallory", 2**63)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert statuses.pop("mallory") in (400, 409)
    assert set(statuses.values()) == {409}
    deadline = time.monotonic() + 10
    while _refusals(shard_id).exclude(agent_id="mallory").count() < HONEST:
        assert time.monotonic() < deadline, "honest refusals missing from the audit"
        time.sleep(0.1)
    _chain_intact()
