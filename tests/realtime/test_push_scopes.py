"""An agent id is a claim, not an identity (issue 16, finding 7).

A key scoped to ``team-a:`` that connects as ``victim-b`` must not receive
victim-b's pushes (they carry team-b values), nor use holder-b's lease."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User

from access.identity import Actor
from access.services import api_key_create
from approvals.services import Decider, approval_decide, approval_request
from common.errors import ApiError
from coordination.models import Lease
from shards.models import Shard
from shards.services import shard_commit, shard_create
from tests.coordination.test_leases import elect, grant
from zerolock_site.asgi import application

DB = pytest.mark.django_db(transaction=True)


async def a_socket(key: str, agent: str) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(
        application,
        "/ws/agents/",
        headers=[(b"x-api-key", key.encode()), (b"x-agent-id", agent.encode())],
    )
    assert (await socket.connect())[0]
    return socket


async def team_keys():
    """Bob's key for team-b: (as victim-b), Mallory's for team-a: (any agent name)."""
    bob, bob_raw = await sync_to_async(api_key_create)(
        name="bob",
        permissions=["shard:read", "shard:write", "approval:request"],
        shard_prefixes=["team-b:"],
    )
    _, mallory_raw = await sync_to_async(api_key_create)(
        name="mallory", permissions=["shard:read", "shard:write"], shard_prefixes=["team-a:"]
    )
    return bob, bob_raw, mallory_raw


@DB
async def test_a_team_a_key_posing_as_victim_b_does_not_get_victim_bs_conflict_notify():
    shard = await sync_to_async(shard_create)(
        actor=Actor("x"), shard_id="team-b:plan", shard_type="decision", initial_value={"k": 1}
    )
    bob, bob_raw, mallory_raw = await team_keys()
    victim = await a_socket(bob_raw, "victim-b")
    impostor = await a_socket(mallory_raw, "victim-b")
    victim_b = Actor("victim-b", bob.prefix)
    await sync_to_async(shard_commit)(
        actor=Actor("winner", bob.prefix), shard=shard, expected_version=1, new_value={"k": 2}
    )
    with pytest.raises(ApiError):
        await sync_to_async(shard_commit)(
            actor=victim_b, shard=shard, expected_version=1, new_value={"secret": "team-b"}
        )
    notice = await victim.receive_json_from(timeout=2)
    assert notice["type"] == "conflict_notify" and notice["shard_id"] == "team-b:plan"
    assert await impostor.receive_nothing(timeout=0.3)
    await victim.disconnect()
    await impostor.disconnect()


@DB
async def test_a_team_a_key_posing_as_the_requester_does_not_hear_the_approval_decision():
    await sync_to_async(shard_create)(
        actor=Actor("x"),
        shard_id="team-b:vault",
        shard_type="decision",
        initial_value={"paid": False},
        reversible=False,
    )
    bob, bob_raw, mallory_raw = await team_keys()
    requester = await a_socket(bob_raw, "victim-b")
    impostor = await a_socket(mallory_raw, "victim-b")
    approval = await sync_to_async(approval_request)(
        actor=Actor("victim-b", bob.prefix),
        shard_id="team-b:vault",
        proposed_value={"paid": "team-b secret"},
        expected_version=1,
        description="pay",
    )
    officer = await sync_to_async(User.objects.create_user)("officer")
    await sync_to_async(approval_decide)(
        approval_id=approval.id,
        decider=Decider.user(officer),
        approve=False,
        reason="no",
    )
    decided = await requester.receive_json_from(timeout=10)
    assert decided["type"] == "approval_decided" and decided["approval_id"] == approval.id
    assert await impostor.receive_nothing(timeout=0.3)
    await requester.disconnect()
    await impostor.disconnect()


def test_a_team_a_key_posing_as_holder_b_can_neither_revoke_nor_keep_alive_its_lease(
    make_key, client_for
):
    """The issue's repro: revoking holder-b's lease freed team-b:leader for Mallory."""
    holder = client_for(
        make_key("shard:read", "shard:write", "shard:create", shard_prefixes=["team-b:"]),
        agent="holder-b",
    )
    mallory = client_for(
        make_key("shard:read", "shard:write", "shard:create", shard_prefixes=["team-a:"]),
        agent="holder-b",
    )
    lease = grant(holder, ttl=60).json()
    holder.post(
        "/api/shards",
        {"id": "team-b:leader", "type": "decision", "initial_value": {}},
        format="json",
    )
    won = holder.post(
        "/api/txn",
        {
            "success": [
                {
                    "op": "put",
                    "shard_id": "team-b:leader",
                    "path": ["leader"],
                    "value": "holder-b",
                    "lease_id": lease["lease_id"],
                }
            ]
        },
        format="json",
    )
    assert won.status_code == 200, won.json()

    revoked = mallory.delete(f"/api/leases/{lease['lease_id']}")
    kept = mallory.post(f"/api/leases/{lease['lease_id']}/keepalive")
    assert (revoked.status_code, revoked.json()["error"]["code"]) == (403, "PERMISSION_DENIED")
    assert (kept.status_code, kept.json()["error"]["code"]) == (403, "PERMISSION_DENIED")
    assert not Lease.objects.get(pk=lease["lease_id"]).revoked
    assert Shard.objects.get(pk="team-b:leader").value == {"leader": "holder-b"}


def test_a_put_with_a_lease_of_another_key_is_refused_even_under_the_same_agent_name(
    make_key, client_for
):
    holder = client_for(make_key("shard:read", "shard:write"), agent="holder-b")
    mallory = client_for(
        make_key("shard:read", "shard:write", "shard:create", shard_prefixes=["team-a:"]),
        agent="holder-b",
    )
    mallory.post(
        "/api/shards", {"id": "team-a:x", "type": "decision", "initial_value": {}}, format="json"
    )
    lease = grant(holder, ttl=60).json()
    refused = mallory.post(
        "/api/txn",
        {
            "success": [
                {
                    "op": "put",
                    "shard_id": "team-a:x",
                    "path": ["y"],
                    "value": 1,
                    "lease_id": lease["lease_id"],
                }
            ]
        },
        format="json",
    )
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "PERMISSION_DENIED")
    assert Shard.objects.get(pk="team-a:x").version == 1


def test_the_holder_itself_still_keeps_alive_and_revokes(planner):
    planner.post(
        "/api/shards",
        {"id": "cluster", "type": "decision", "initial_value": {"term": 1}},
        format="json",
    )
    lease = grant(planner, ttl=60).json()
    elect(planner, "planner-1", lease["lease_id"])
    assert planner.post(f"/api/leases/{lease['lease_id']}/keepalive").status_code == 200
    assert planner.delete(f"/api/leases/{lease['lease_id']}").status_code == 204
    assert Shard.objects.get(pk="cluster").value == {"term": 1}
