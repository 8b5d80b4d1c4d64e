"""Finding 15b: a 409 must never contradict itself. The stale pre-check uses the
version of the rules read, then (to build the refusal) reads the version and
value again, both without the write lock; a commit landing between the two reads made a refusal of
``expected_version: 11`` report ``current_version: 11``. Linearizability
checkers flag that: a version cannot be both current and stale."""

from __future__ import annotations

import random
import threading
import uuid

import httpx
import pytest

from access.identity import Actor
from access.services import api_key_create
from common.errors import ApiError
from shards import services
from shards.models import Shard
from shards.selectors import shard_get
from shards.services import shard_commit, shard_create

ALICE = Actor(agent_id="alice")
BOB = Actor(agent_id="bob")


def _decision(shard_id: str, *, version: int) -> None:
    shard_create(actor=BOB, shard_id=shard_id, shard_type="decision", initial_value=0)
    for v in range(1, version):
        shard_commit(actor=BOB, shard=shard_get(shard_id), expected_version=v, new_value=v)


@pytest.mark.django_db
def test_alice_expecting_v11_is_not_told_v11_is_current_when_bob_made_it_between_the_reads():
    _decision("race.counter", version=10)
    # The pre-check's first read is the rules read the view makes (shard_get):
    # Alice's shows v10; Bob's commit makes v11 before her commit reads again.
    # (The window is microseconds wide; the live test below races for real.)
    alice_read = shard_get("race.counter", payload=False)
    shard_commit(actor=BOB, shard=shard_get("race.counter"), expected_version=10, new_value="bob")
    try:
        result = shard_commit(actor=ALICE, shard=alice_read, expected_version=11, new_value="alice")
    except ApiError as refusal:
        assert refusal.details["current_version"] != refusal.details["expected_version"]
        raise
    # Decided under the lock, where v11 is current: Alice's commit is the next version.
    assert result.version == 12
    assert shard_get("race.counter").value == "alice"


@pytest.mark.django_db
def test_a_delete_and_re_create_between_the_reads_cannot_make_a_409_report_the_expected_version():
    _decision("race.phoenix", version=5)

    def delete_and_rebuild_to_v3() -> None:
        services.shard_delete(actor=BOB, shard_id="race.phoenix")
        _decision("race.phoenix", version=3)

    # Alice expects v3 while the shard is at v5 (stale); before the second read
    # the shard is deleted and re-created up to v3. The shard Alice read is gone:
    # her commit falls through to the locked path, which knows the shard by its
    # incarnation and answers 404, never a 409 naming v3 as both stale and current.
    alice_read = shard_get("race.phoenix", payload=False)  # v5: past her v3, so read again
    delete_and_rebuild_to_v3()
    with pytest.raises(ApiError) as refused:
        shard_commit(actor=ALICE, shard=alice_read, expected_version=3, new_value="alice")
    assert refused.value.code == "SHARD_NOT_FOUND"
    assert Shard.objects.get(pk="race.phoenix").version == 3


@pytest.mark.django_db
def test_a_commit_expecting_a_version_the_shard_has_not_reached_is_refused_with_the_true_version():
    _decision("race.ahead", version=2)
    with pytest.raises(ApiError) as refused:
        shard_commit(actor=ALICE, shard=shard_get("race.ahead"), expected_version=7, new_value=1)
    assert refused.value.code == "STALE_VERSION"
    assert refused.value.details["current_version"] == 2


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_no_409_under_a_commit_storm_reports_the_refused_version_as_current(live_server_url):
    """Forty agents hammer four shards; a third of them bet on the version after
    the one they saw (the case that opened the window). Every 409 is checked."""
    _, raw = api_key_create(name="storm", permissions=["shard:read", "shard:write", "shard:create"])
    prefix = f"storm-{uuid.uuid4().hex[:6]}"
    with httpx.Client(
        base_url=live_server_url, headers={"X-API-Key": raw, "X-Agent-Id": "setup"}
    ) as setup:
        for n in range(4):
            created = setup.post(
                "/api/shards", json={"id": f"{prefix}.{n}", "type": "decision", "initial_value": 0}
            )
            assert created.status_code == 201, created.text
    contradictions: list[dict] = []
    refusals = []
    others: list[str] = []
    lock = threading.Lock()

    def agent(n: int) -> None:
        shard = f"{prefix}.{n % 4}"
        rng = random.Random(n)
        with httpx.Client(
            base_url=live_server_url,
            headers={"X-API-Key": raw, "X-Agent-Id": f"agent-{n}"},
            timeout=60,
        ) as client:
            version = client.get(f"/api/shards/{shard}").json()["version"]
            for _ in range(25):
                expected = version + (1 if n % 3 == 0 and rng.random() < 0.7 else 0)
                response = client.post(
                    f"/api/shards/{shard}/commit",
                    json={"expected_version": expected, "new_value": n},
                )
                if response.status_code == 200:
                    version = response.json()["version"]
                    continue
                if response.status_code != 409:
                    with lock:
                        others.append(response.text[:200])
                    continue
                error = response.json()["error"]
                with lock:
                    refusals.append(error["code"])
                    if error["current_version"] == error["expected_version"]:
                        contradictions.append(error)
                version = error["current_version"]

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not others, others[:3]
    assert refusals, "the storm produced no refusal at all"
    assert contradictions == []
