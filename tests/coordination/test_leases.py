"""Leases: holders that stop keeping alive lose what they hold, and a holder that
lost its lease cannot overwrite its successor (fencing)."""

from __future__ import annotations

import time

import httpx
import pytest
import time_machine
from django.utils import timezone

from access.services import api_key_create
from audit.models import AuditEntry
from coordination.models import Lease
from shards.models import Shard

pytestmark = pytest.mark.django_db


def grant(client, ttl=10):
    return client.post("/api/leases", {"ttl_seconds": ttl}, format="json")


def elect(client, agent, lease_id, fence=None):
    """Become leader if there is none: the name is held by the lease."""
    body = {
        "compare": [{"shard_id": "cluster", "path": ["leader"], "op": "not_exists"}],
        "success": [
            {
                "op": "put",
                "shard_id": "cluster",
                "path": ["leader"],
                "value": agent,
                "lease_id": lease_id,
            }
        ],
        "failure": [{"op": "get", "shard_id": "cluster", "path": ["leader"]}],
    }
    if fence is not None:
        body["fence"] = fence
    return client.post("/api/txn", body, format="json").json()


@pytest.fixture
def cluster(planner):
    planner.post(
        "/api/shards",
        {"id": "cluster", "type": "decision", "initial_value": {"term": 1}},
        format="json",
    )


@pytest.fixture
def standby(make_key, client_for):
    return client_for(make_key("shard:read", "shard:write"), agent="standby")


def test_a_lease_has_a_ttl_an_expiry_and_a_growing_fence(planner):
    first, second = grant(planner).json(), grant(planner, ttl=30).json()
    assert first["ttl_seconds"] == 10 and first["lease_id"].startswith("lse_")
    assert second["fence"] > first["fence"]
    assert grant(planner, ttl=0).status_code == 400
    assert grant(planner, ttl="ten").status_code == 400


def test_a_lease_held_name_disappears_when_the_lease_expires_and_a_standby_takes_over(
    planner, standby, cluster
):
    lease = grant(planner, ttl=5).json()
    assert elect(planner, "planner-1", lease["lease_id"])["succeeded"] is True
    standby_lease = grant(standby, ttl=60).json()
    lost = elect(standby, "standby", standby_lease["lease_id"])
    assert lost["succeeded"] is False and lost["responses"][0]["value"] == "planner-1"
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=6)):
        # No worker: the next write (or read) ends the lease and frees the name.
        assert standby.get("/api/shards/cluster").json()["value"] == {"term": 1}
        won = elect(standby, "standby", standby_lease["lease_id"])
        assert won["succeeded"] is True
    assert Shard.objects.get(pk="cluster").value == {"term": 1, "leader": "standby"}
    released = AuditEntry.objects.get(action="lease.released_path")
    assert released.details["paths"] == [["leader"]] and released.details["why"] == "expired"


def test_keepalive_extends_and_revoke_releases_at_once(planner, standby, cluster):
    lease = grant(planner, ttl=5).json()
    elect(planner, "planner-1", lease["lease_id"])
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=4)):
        kept = planner.post(f"/api/leases/{lease['lease_id']}/keepalive").json()
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=7)):
        assert standby.get("/api/shards/cluster").json()["value"]["leader"] == "planner-1"
    assert kept["expires_at"] > lease["expires_at"]
    assert standby.delete(f"/api/leases/{lease['lease_id']}").status_code == 403  # not the holder
    assert planner.delete(f"/api/leases/{lease['lease_id']}").status_code == 204
    assert "leader" not in Shard.objects.get(pk="cluster").value
    assert planner.post(f"/api/leases/{lease['lease_id']}/keepalive").status_code == 404


def test_a_stale_holder_with_an_old_fence_is_refused(planner, standby, cluster):
    old = grant(planner, ttl=5).json()
    elect(planner, "planner-1", old["lease_id"], fence=old["fence"])
    new = grant(standby, ttl=60).json()
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=6)):
        assert elect(standby, "standby", new["lease_id"], fence=new["fence"])["succeeded"]
        # The old leader wakes up and writes with the fence it had.
        version = Shard.objects.get(pk="cluster").version
        stale = planner.post(
            "/api/shards/cluster/commit",
            {
                "expected_version": version,
                "new_value": {"leader": "planner-1"},
                "fence": old["fence"],
            },
            format="json",
        )
    assert (stale.status_code, stale.json()["error"]["code"]) == (409, "FENCED")
    assert stale.json()["error"]["current_fence"] == new["fence"]
    assert Shard.objects.get(pk="cluster").value["leader"] == "standby"


def test_a_put_with_someone_elses_lease_is_refused(planner, standby, cluster):
    lease = grant(planner).json()
    response = standby.post(
        "/api/txn",
        {
            "success": [
                {
                    "op": "put",
                    "shard_id": "cluster",
                    "path": ["x"],
                    "value": 1,
                    "lease_id": lease["lease_id"],
                }
            ]
        },
        format="json",
    )
    assert response.status_code == 403
    assert "x" not in Shard.objects.get(pk="cluster").value


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_holder_that_stops_keeping_alive_loses_its_claim_once_its_ttl_is_over(
    live_server_url,
):
    _, key = api_key_create(name="nodes", permissions=["shard:read", "shard:write", "shard:create"])
    client = httpx.Client(base_url=live_server_url, headers={"X-API-Key": key}, timeout=10)

    def as_agent(agent):
        return {"X-Agent-Id": agent}

    client.post(
        "/api/shards",
        json={"id": "jobs", "type": "decision", "initial_value": {}},
        headers=as_agent("boss"),
    )

    def claim(agent, lease_id):
        return client.post(
            "/api/txn",
            json={
                "compare": [{"shard_id": "jobs", "path": ["job-1"], "op": "not_exists"}],
                "success": [
                    {
                        "op": "put",
                        "shard_id": "jobs",
                        "path": ["job-1"],
                        "value": agent,
                        "lease_id": lease_id,
                    }
                ],
                "failure": [{"op": "get", "shard_id": "jobs", "path": ["job-1"]}],
            },
            headers=as_agent(agent),
        ).json()

    asked_at = time.monotonic()
    first = client.post("/api/leases", json={"ttl_seconds": 2}, headers=as_agent("crasher")).json()
    assert claim("crasher", first["lease_id"])["succeeded"]
    # The crasher now stops sending keep-alives. The survivor keeps trying.
    second = client.post(
        "/api/leases", json={"ttl_seconds": 30}, headers=as_agent("survivor")
    ).json()
    while not claim("survivor", second["lease_id"])["succeeded"]:
        # Liveness, not a latency figure: the claim frees at the first attempt after
        # the 2 s TTL (about 2.1 s here); 10 s leaves room for a loaded machine.
        assert time.monotonic() - asked_at < 10, "the abandoned claim was never freed"
        time.sleep(0.1)
    print(f"\ntaken {time.monotonic() - asked_at:.2f} s after the 2 s lease was asked for")
    crashed = Lease.objects.get(pk=first["lease_id"])
    assert crashed.revoked
    # Safety, by the server's own clock: never taken before the lease expired.
    assert Shard.objects.get(pk="jobs").updated_at >= crashed.expires_at
    assert Shard.objects.get(pk="jobs").value == {"job-1": "survivor"}


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_lease_granted_by_another_process_still_ends_on_time_in_the_server(
    live_server_url, planner, cluster
):
    """Each server process keeps the soonest lease expiry in memory instead of
    asking the database on every read. A lease granted elsewhere (here: this test
    process) must still be ended by the server's next read once it is due."""
    lease = grant(planner, ttl=1).json()
    granted = time.monotonic()
    assert elect(planner, "planner-1", lease["lease_id"])["succeeded"] is True
    _, raw = api_key_create(name="reader", permissions=["shard:read"])
    with httpx.Client(
        base_url=live_server_url, headers={"X-API-Key": raw, "X-Agent-Id": "reader"}, timeout=30
    ) as reader:
        assert reader.get("/api/shards/cluster").status_code == 200  # the server has looked
        time.sleep(max(0.0, granted + 1.2 - time.monotonic()))
        after = reader.get("/api/shards/cluster").json()["value"]
    assert after == {"term": 1}
