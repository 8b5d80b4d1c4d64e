"""State is bound to a shard's identity, not its name (issue 16, finding 5).

A shard deleted and re-created under the same id is another shard: the old one's
Yjs sockets, lease bindings, approvals and subscriptions must not reach it."""

from __future__ import annotations

import pytest
import time_machine
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from pycrdt import create_update_message

from access.identity import Actor
from access.services import api_key_create
from audit.models import AuditEntry
from common.errors import ApiError
from coordination.models import LeaseBinding
from shards.models import CrdtUpdate, Shard
from shards.selectors import shard_get
from shards.services import additive_update_apply, shard_create, shard_delete
from tests.coordination.test_leases import elect, grant
from tests.realtime.test_yjs_sync import a_key, a_shard, local_doc, refusal, socket_to, synced
from zerolock_site.asgi import application

DB = pytest.mark.django_db(transaction=True)
ADMIN = Actor("admin-1")


def owners_only_vault(shard_id: str, crdt_type: str = "array") -> Shard:
    """The re-created shard: irreversible, owners-only, at most one item."""
    return shard_create(
        actor=Actor("creator"),
        shard_id=shard_id,
        shard_type="additive",
        crdt_type=crdt_type,
        reversible=False,
        owner_policy="owners-only",
        owners=["treasurer"],
        value_schema={"type": "array", "maxItems": 1},
    )


@DB
async def test_deleting_a_shard_closes_its_yjs_socket_with_4404():
    await a_shard("scratch", "array", ["old"])
    mallory = socket_to("scratch", await a_key(), agent="mallory")
    assert (await mallory.connect())[0]
    await synced(mallory, local_doc("array")[0])

    await sync_to_async(shard_delete)(actor=ADMIN, shard_id="scratch")

    error, code = await refusal(mallory)
    assert (error["error"]["code"], code) == ("SHARD_NOT_FOUND", 4404)


@DB
async def test_a_socket_opened_before_a_delete_cannot_write_to_the_re_created_owners_only_shard():
    """The issue's repro: mallory's socket kept the old row's rules and appended
    to the new irreversible, owners-only shard, breaking its schema. Here the
    close message is raced: the update arrives as if the socket were still open."""
    await a_shard("scratch", "array", ["old"])
    mallory = socket_to("scratch", await a_key(), agent="mallory")
    assert (await mallory.connect())[0]
    doc, root = local_doc("array")
    await synced(mallory, doc)
    stale_rules = await sync_to_async(shard_get)("scratch", payload=False)

    await sync_to_async(shard_delete)(actor=ADMIN, shard_id="scratch")
    await sync_to_async(owners_only_vault)("scratch")

    before = doc.get_state()
    root.extend(["spend", "more"])
    update = doc.get_update(before)
    # Through the socket (whatever it still holds) ...
    await mallory.send_to(bytes_data=create_update_message(update))
    error, code = await refusal(mallory)
    assert (error["error"]["code"], code) == ("SHARD_NOT_FOUND", 4404)
    # ... and through the service with the old row's rules, as a racing socket would.
    with pytest.raises(ApiError) as refused:
        await sync_to_async(additive_update_apply)(
            actor=Actor("mallory"), shard=stale_rules, update=update
        )
    assert refused.value.code == "SHARD_NOT_FOUND"

    fresh = await sync_to_async(Shard.objects.get)(pk="scratch")
    assert fresh.version == 1 and fresh.value == []
    assert not await sync_to_async(CrdtUpdate.objects.filter(shard_id="scratch").exists)()


@DB
async def test_a_socket_opened_on_the_re_created_shard_follows_its_new_rules():
    await a_shard("scratch", "array", ["old"])
    await sync_to_async(shard_delete)(actor=ADMIN, shard_id="scratch")
    await sync_to_async(owners_only_vault)("scratch")
    mallory = socket_to("scratch", await a_key(), agent="mallory")
    assert (await mallory.connect())[0]
    doc, root = local_doc("array")
    await synced(mallory, doc)
    before = doc.get_state()
    root.append("spend")
    await mallory.send_to(bytes_data=create_update_message(doc.get_update(before)))
    error, code = await refusal(mallory)
    assert (error["error"]["code"], code) == ("NOT_AN_OWNER", 4403)


def test_a_lease_bound_before_a_delete_writes_nothing_to_the_re_created_shard(planner, admin):
    """The issue's repro: the lease's binding outlived the delete and, at expiry,
    wrote a new version of the re-created irreversible shard with no approval."""
    planner.post(
        "/api/shards",
        {"id": "cluster", "type": "decision", "initial_value": {"term": 1}},
        format="json",
    )
    lease = grant(planner, ttl=5).json()
    assert elect(planner, "planner-1", lease["lease_id"])["succeeded"] is True
    assert admin.delete("/api/shards/cluster").status_code == 204
    assert not LeaseBinding.objects.filter(shard_id="cluster").exists()
    created = admin.post(
        "/api/shards",
        {
            "id": "cluster",
            "type": "decision",
            "initial_value": {"term": 9, "leader": "planner-1"},
            "reversible": False,
        },
        format="json",
    )
    assert created.status_code == 201

    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=6)):
        assert admin.get("/api/shards/cluster").json()["version"] == 1  # ends the lease

    shard = Shard.objects.get(pk="cluster")
    assert (shard.version, shard.value) == (1, {"term": 9, "leader": "planner-1"})
    assert not AuditEntry.objects.filter(action="lease.released_path").exists()
    history = admin.get("/api/shards/cluster/history").json()
    assert [h["version"] for h in history] == [1]


def test_a_binding_recorded_for_an_old_incarnation_is_never_applied(planner, admin):
    """Fail closed even if a binding slipped past the delete (a racing write)."""
    planner.post(
        "/api/shards",
        {"id": "cluster", "type": "decision", "initial_value": {"term": 1}},
        format="json",
    )
    lease = grant(planner, ttl=5).json()
    elect(planner, "planner-1", lease["lease_id"])
    binding = LeaseBinding.objects.get(shard_id="cluster")
    admin.delete("/api/shards/cluster")
    admin.post(
        "/api/shards",
        {"id": "cluster", "type": "decision", "initial_value": {"leader": "planner-1"}},
        format="json",
    )
    binding.pk = None
    binding.save()  # as if bound just before the delete committed
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=6)):
        admin.get("/api/shards/cluster")
    assert Shard.objects.get(pk="cluster").version == 1


def test_every_version_including_a_lease_release_appears_in_history(planner):
    planner.post(
        "/api/shards",
        {"id": "cluster", "type": "decision", "initial_value": {"term": 1}},
        format="json",
    )
    lease = grant(planner, ttl=5).json()
    elect(planner, "planner-1", lease["lease_id"])
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=6)):
        current = planner.get("/api/shards/cluster").json()
    assert current["version"] == 3
    history = planner.get("/api/shards/cluster/history").json()
    assert [h["version"] for h in history] == [1, 2, 3]
    assert history[-1]["value"] == {"term": 1}


def test_an_approval_granted_on_a_deleted_shard_never_applies_to_the_re_created_one(
    make_key, client_for, admin
):
    requester = client_for(
        make_key("shard:read", "shard:create", "approval:request"), agent="payer"
    )
    officer = client_for(make_key("approval:decide"), agent="officer")
    requester.post(
        "/api/shards",
        {"id": "payout", "type": "decision", "initial_value": {"paid": False}, "reversible": False},
        format="json",
    )
    approval = requester.post(
        "/api/approvals/request",
        {
            "shard_id": "payout",
            "proposed_value": {"paid": True},
            "expected_version": 1,
            "description": "pay",
        },
        format="json",
    ).json()
    assert admin.delete("/api/shards/payout").status_code == 204
    requester.post(
        "/api/shards",
        {"id": "payout", "type": "decision", "initial_value": {"paid": False}, "reversible": False},
        format="json",
    )
    decided = officer.post(f"/api/approvals/{approval['id']}/approve", format="json")
    assert decided.status_code == 409
    assert Shard.objects.get(pk="payout").value == {"paid": False}


@DB
async def test_a_subscriber_hears_the_delete_once_and_nothing_from_the_re_created_shard():
    await sync_to_async(shard_create)(
        actor=Actor("x"), shard_id="plan", shard_type="decision", initial_value=1
    )
    _, key = await sync_to_async(api_key_create)(name="k", permissions=["shard:read"])
    watcher = WebsocketCommunicator(
        application,
        "/ws/agents/",
        headers=[(b"x-api-key", key.encode()), (b"x-agent-id", b"watcher")],
    )
    assert (await watcher.connect())[0]
    await watcher.send_json_to({"type": "subscribe", "shard_ids": ["plan"]})
    assert (await watcher.receive_json_from())["type"] == "subscribed"

    await sync_to_async(shard_delete)(actor=ADMIN, shard_id="plan")
    notice = await watcher.receive_json_from(timeout=2)
    assert notice == {
        "type": "invalidate",
        "shard_id": "plan",
        "version": None,
        "committed_by": "admin-1",
        "deleted": True,
    }
    shard = await sync_to_async(shard_create)(
        actor=Actor("x"), shard_id="plan", shard_type="decision", initial_value=2
    )
    from shards.services import shard_commit

    await sync_to_async(shard_commit)(
        actor=Actor("y"), shard=shard, expected_version=1, new_value=3
    )
    assert await watcher.receive_nothing(timeout=0.3)
    await watcher.disconnect()
