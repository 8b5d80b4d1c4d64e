"""Every path that can give a shard a new version goes through the one version
writer, and it shows: REST commit, transaction, claim, additive op, Yjs update,
approved commit, lease expiry. For each path, through the real ASGI app (REST
views, WebSocket consumers, in-memory channel layer, the test database):

- an expired lease is ended (and what it held removed) in the same write
  transaction, before the path's own version;
- a write carrying an old fence is refused (the paths whose requests carry one);
- the new version has exactly one audit entry;
- the commit is counted in the metrics;
- a subscriber gets ``invalidate`` for exactly that version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from pycrdt import create_update_message
from rest_framework.test import APIClient

from access.services import api_key_create
from audit.chain import verify_chain
from audit.models import AuditAction, AuditEntry
from coordination.leases import next_expiry
from coordination.models import Lease
from metrics.models import CommitSample
from shards import writer
from shards.models import Shard
from shards.rules import Exemption
from tests.realtime.test_yjs_sync import local_doc, synced
from zerolock_site.asgi import application

DB = pytest.mark.django_db(transaction=True)
VERSIONED = [AuditAction.SHARD_CREATE, AuditAction.SHARD_COMMIT, AuditAction.LEASE_RELEASED_PATH]


def a_client(agent: str, *permissions: str) -> tuple[APIClient, str]:
    _, raw = api_key_create(name=agent, permissions=list(permissions) or ["admin"])
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=raw, HTTP_X_AGENT_ID=agent)
    return client, raw


@dataclass
class World:
    """Who acts: a writer agent, an approver (another key), an observer socket."""

    writer: APIClient
    writer_key: str
    approver: APIClient
    observer: WebsocketCommunicator

    async def rest(self, method: str, path: str, body: dict | None = None, *, client=None):
        client = client or self.writer
        call = getattr(client, method)
        return await sync_to_async(call)(path, body, format="json")


async def a_world() -> World:
    writer, writer_key = await sync_to_async(a_client)("writer-1")
    approver, _ = await sync_to_async(a_client)("approver-1", "approval:decide", "shard:read")
    _, observer_key = await sync_to_async(a_client)("observer-1", "shard:read")
    observer = WebsocketCommunicator(
        application,
        "/ws/agents/",
        headers=[(b"x-api-key", observer_key.encode()), (b"x-agent-id", b"observer-1")],
    )
    assert (await observer.connect())[0]
    return World(writer, writer_key, approver, observer)


async def subscribed(world: World, shard_id: str) -> None:
    await world.observer.send_json_to({"type": "subscribe", "shard_ids": [shard_id]})
    assert (await world.observer.receive_json_from(timeout=5))["type"] == "subscribed"


async def create(world: World, shard_id: str, **fields) -> None:
    body = {"id": shard_id, "type": "decision", "initial_value": {}, **fields}
    response = await world.rest("post", "/api/shards", body)
    assert response.status_code == 201, response.json()


async def an_expired_lease_holding(world: World, shard_id: str) -> str:
    """A lease that holds ``leader`` in ``shard_id``, already past its time (its
    expiry is set in the past directly: nothing has swept it yet)."""
    if not await sync_to_async(Shard.objects.filter(pk=shard_id).exists)():
        await create(world, shard_id)
    lease = (await world.rest("post", "/api/leases", {"ttl_seconds": 60})).json()["lease_id"]
    put = {"op": "put", "shard_id": shard_id, "path": ["leader"], "value": "w", "lease_id": lease}
    response = await world.rest("post", "/api/txn", {"success": [put]})
    assert response.status_code == 200, response.json()
    past = timezone.now() - timedelta(seconds=1)
    await sync_to_async(lambda: Lease.objects.filter(pk=lease).update(expires_at=past))()
    # A change made behind the process's back is learnt within
    # NextExpiry.REFRESH_SECONDS; this test does not wait for it.
    next_expiry.forget()
    return lease


# --- the paths: each returns (shard id, the version it wrote) ------------------------


async def via_rest_commit(world: World) -> tuple[str, int]:
    await create(world, "w-rest", initial_value={"n": 1})
    await subscribed(world, "w-rest")
    await an_expired_lease_holding(world, "lease-target-rest")
    body = {"expected_version": 1, "new_value": {"n": 2}}
    response = await world.rest("post", "/api/shards/w-rest/commit", body)
    assert response.status_code == 200, response.json()
    return "w-rest", response.json()["version"]


async def via_txn(world: World) -> tuple[str, int]:
    await create(world, "w-txn", initial_value={"n": 1})
    await subscribed(world, "w-txn")
    await an_expired_lease_holding(world, "lease-target-txn")
    put = {"op": "put", "shard_id": "w-txn", "path": ["n"], "value": 2}
    response = await world.rest("post", "/api/txn", {"success": [put]})
    assert response.status_code == 200, response.json()
    return "w-txn", response.json()["versions"]["w-txn"]


async def via_claim(world: World) -> tuple[str, int]:
    await create(world, "w-claim", initial_value={"t1": {"status": "pending"}})
    await subscribed(world, "w-claim")
    await an_expired_lease_holding(world, "lease-target-claim")
    body = {"where": {"status": "pending"}, "set": {"status": "claimed"}}
    response = await world.rest("post", "/api/shards/w-claim/claim", body)
    assert response.status_code == 200, response.json()
    return "w-claim", response.json()["version"]


async def via_additive(world: World) -> tuple[str, int]:
    await create(world, "w-add", type="additive", crdt_type="array", initial_value=[])
    await subscribed(world, "w-add")
    await an_expired_lease_holding(world, "lease-target-add")
    response = await world.rest("post", "/api/shards/w-add/commit", {"append": ["x"]})
    assert response.status_code == 200, response.json()
    return "w-add", response.json()["version"]


async def via_yjs(world: World) -> tuple[str, int]:
    await create(world, "w-yjs", type="additive", crdt_type="array", initial_value=[])
    await subscribed(world, "w-yjs")
    editor = WebsocketCommunicator(
        application,
        "/ws/crdt/w-yjs",
        headers=[(b"x-api-key", world.writer_key.encode()), (b"x-agent-id", b"writer-1")],
    )
    assert (await editor.connect())[0]
    doc, root = local_doc("array")
    await synced(editor, doc)
    await an_expired_lease_holding(world, "lease-target-yjs")
    before = doc.get_state()
    root.append("from-yjs")
    await editor.send_to(bytes_data=create_update_message(doc.get_update(before)))
    for _ in range(100):  # the update is applied on the consumer's thread
        version = await sync_to_async(Shard.objects.get)(pk="w-yjs")
        if version.version == 2:
            break
        await asyncio.sleep(0.05)
    await editor.disconnect()
    return "w-yjs", 2


async def via_approval(world: World) -> tuple[str, int]:
    await create(world, "w-gate", initial_value={"limit": 1}, reversible=False)
    await subscribed(world, "w-gate")
    request = {
        "shard_id": "w-gate",
        "proposed_value": {"limit": 2},
        "expected_version": 1,
        "description": "raise the limit",
    }
    asked = await world.rest("post", "/api/approvals/request", request)
    assert asked.status_code == 201, asked.json()
    await an_expired_lease_holding(world, "lease-target-gate")
    approval_id = asked.json()["id"]
    decided = await world.rest(
        "post", f"/api/approvals/{approval_id}/approve", {}, client=world.approver
    )
    assert decided.status_code == 200, decided.json()
    assert decided.json()["status"] == "committed", decided.json()
    return "w-gate", decided.json()["commit"]["version"]


async def via_lease_expiry(world: World) -> tuple[str, int]:
    await create(world, "w-lease", initial_value={})
    await subscribed(world, "w-lease")
    await an_expired_lease_holding(world, "w-lease")  # writes version 2 (the put)
    # Any write transaction sweeps; a lease grant is one that writes no shard.
    response = await world.rest("post", "/api/leases", {"ttl_seconds": 60})
    assert response.status_code == 201
    shard = await sync_to_async(Shard.objects.get)(pk="w-lease")
    assert shard.value == {} and shard.version == 3
    return "w-lease", 3


PATHS: dict[str, Callable[[World], Awaitable[tuple[str, int]]]] = {
    "REST commit": via_rest_commit,
    "transaction": via_txn,
    "claim": via_claim,
    "additive op": via_additive,
    "Yjs update": via_yjs,
    "approved commit": via_approval,
    "lease expiry": via_lease_expiry,
}


def _entries(shard_id: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(shard_id=shard_id, action__in=VERSIONED))


def _samples(shard_id: str) -> int:
    return CommitSample.objects.filter(shard_id=shard_id, outcome=CommitSample.OK).count()


async def told_versions(observer: WebsocketCommunicator, shard_id: str, upto: int) -> list[int]:
    """The versions of ``shard_id`` the observer is told about, in order, until
    ``upto`` (a missing push fails the wait); then nothing more may come."""
    seen: list[int] = []
    while upto not in seen:
        message = await observer.receive_json_from(timeout=5)
        if message.get("type") == "invalidate" and message["shard_id"] == shard_id:
            seen.append(message["version"])
    assert await observer.receive_nothing(timeout=0.3)
    return seen


# The rules each path's version is written under: all of them, or the named exemption.
EXEMPTIONS: dict[str, Exemption | None] = {
    "REST commit": None,
    "transaction": None,
    "claim": None,
    "additive op": None,
    "Yjs update": None,
    "approved commit": Exemption.APPROVED,
    "lease expiry": Exemption.LEASE_END,
}


@DB
@pytest.mark.parametrize("path", PATHS)
async def test_each_path_writes_through_the_one_version_writer(path, monkeypatch):
    applied: list[tuple[str, Exemption | None]] = []
    real_rules = writer.rules_locked

    def rules_seen(shard, actor, rules, **kwargs):
        applied.append((shard.id, rules.exemption))
        return real_rules(shard, actor, rules, **kwargs)

    monkeypatch.setattr(writer, "rules_locked", rules_seen)
    world = await a_world()
    shard_id, version = await PATHS[path](world)

    # The writer applied the rules to this path's version itself, less the named
    # exemption; and to the expired lease's release, as a lease's end.
    assert (shard_id, EXEMPTIONS[path]) in applied, applied
    released = [e for sid, e in applied if sid.startswith("lease-target") or sid == "w-lease"]
    assert released[-1] == Exemption.LEASE_END, applied

    # One audit entry per version, none missing, none twice.
    entries = await sync_to_async(_entries)(shard_id)
    assert [e.version_after for e in entries] == list(range(1, version + 1))
    newest = entries[-1]

    # An expired lease was ended in the same write transaction, before this version.
    ended = await sync_to_async(
        lambda: list(AuditEntry.objects.filter(action=AuditAction.LEASE_ENDED).order_by("id"))
    )()
    assert ended, "no lease was ended"
    assert ended[-1].details["why"] == "expired"
    assert ended[-1].pk < newest.pk
    released = await sync_to_async(
        lambda: AuditEntry.objects.filter(action=AuditAction.LEASE_RELEASED_PATH).last()
    )()
    assert released is not None and released.pk <= newest.pk
    held = await sync_to_async(Shard.objects.get)(pk=released.shard_id)
    assert "leader" not in held.value  # what the expired lease held is gone
    assert not await sync_to_async(Lease.objects.due().exists)()

    # Counted in the metrics: every version after the first (creation is not a commit).
    assert await sync_to_async(_samples)(shard_id) == version - 1

    # The subscriber was told, and told the new version.
    told = await told_versions(world.observer, shard_id, version)
    assert told[-1] == version and len(told) == len(set(told))
    await world.observer.disconnect()


FENCE_CARRIERS = {
    "REST commit": ("w-f-rest", {"type": "decision", "initial_value": {}}),
    "additive op": ("w-f-add", {"type": "additive", "crdt_type": "array", "initial_value": []}),
    "transaction": ("w-f-txn", {"type": "decision", "initial_value": {}}),
    "claim": ("w-f-claim", {"type": "decision", "initial_value": {}}),
}


def _fenced_write(kind: str, shard_id: str, version: int, fence: int) -> tuple[str, dict]:
    if kind == "REST commit":
        body = {"expected_version": version, "new_value": {"v": version}, "fence": fence}
        return f"/api/shards/{shard_id}/commit", body
    if kind == "additive op":
        return f"/api/shards/{shard_id}/commit", {"append": [version], "fence": fence}
    if kind == "claim":
        # The first write makes a task for the second to claim.
        if version == 1:
            body = {"expected_version": 1, "new_value": {"t": {"s": "free"}}, "fence": fence}
            return f"/api/shards/{shard_id}/commit", body
        body = {"where": {"s": "free"}, "set": {"s": "taken"}, "fence": fence}
        return f"/api/shards/{shard_id}/claim", body
    put = {"op": "put", "shard_id": shard_id, "path": ["v"], "value": version}
    return "/api/txn", {"success": [put], "fence": fence}


@DB
@pytest.mark.parametrize("kind", FENCE_CARRIERS)
async def test_a_write_with_an_older_fence_than_the_shard_has_seen_is_refused(kind):
    world = await a_world()
    shard_id, fields = FENCE_CARRIERS[kind]
    await create(world, shard_id, **fields)
    path, body = _fenced_write(kind, shard_id, 1, fence=100)
    assert (await world.rest("post", path, body)).status_code == 200

    path, body = _fenced_write(kind, shard_id, 2, fence=50)
    refused = await world.rest("post", path, body)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "FENCED"
    shard = await sync_to_async(Shard.objects.get)(pk=shard_id)
    assert shard.version == 2 and shard.fence == 100
    assert [e.version_after for e in await sync_to_async(_entries)(shard_id)] == [1, 2]
    refusals = await sync_to_async(_refusals)(shard_id)
    assert [(e.details["code"], e.version_before) for e in refusals] == [("FENCED", 2)]
    assert (await sync_to_async(verify_chain)())[1] is None
    await world.observer.disconnect()


def _refusals(shard_id: str) -> list[AuditEntry]:
    return list(
        AuditEntry.objects.filter(shard_id=shard_id, action=AuditAction.SHARD_COMMIT_REJECTED)
    )


@DB
async def test_the_fence_is_checked_by_the_writer_not_by_each_caller():
    """The same rule refuses a fenced additive write through a transaction's append."""
    world = await a_world()
    await create(world, "w-f-append", type="additive", crdt_type="array", initial_value=[])
    append = {"op": "append", "shard_id": "w-f-append", "items": [1]}
    assert (
        await world.rest("post", "/api/txn", {"success": [append], "fence": 9})
    ).status_code == 200
    refused = await world.rest("post", "/api/txn", {"success": [append], "fence": 3})
    assert refused.json()["error"]["code"] == "FENCED"
    await world.observer.disconnect()


def test_a_version_write_outside_a_write_transaction_is_a_programming_error(db):
    from access.identity import Actor
    from audit.chain import audited_transaction
    from shards.rules import WriteRules
    from shards.writer import version_write
    from shards.writetx import WriteTx

    shard = Shard.objects.create(
        id="bare", type="decision", value={}, created_by="t", updated_by="t"
    )
    with pytest.raises(RuntimeError, match="write_transaction"), audited_transaction() as audit:
        # A WriteTx made by hand, not by write_transaction (whose sweeps never ran).
        version_write(
            tx=WriteTx(audit=audit, started=0.0),
            shard=shard,
            actor=Actor("t"),
            expected_version=1,
            value={},
            rules=WriteRules(),
        )
    assert Shard.objects.get(pk="bare").version == 1


@DB
async def test_a_lease_end_frees_its_task_even_where_the_schema_wants_a_holder():
    """docs/decisions.md: a lease's end is exempt from the schema (and the owners
    and the gate): a dead holder's task must come free."""
    world = await a_world()
    schema = {
        "type": "object",
        "additionalProperties": {"type": "object", "required": ["holder"]},
    }
    await create(world, "w-held", initial_value={"t1": {"holder": "nobody"}}, value_schema=schema)
    lease = (await world.rest("post", "/api/leases", {"ttl_seconds": 60})).json()["lease_id"]
    put = {"op": "put", "shard_id": "w-held", "path": ["t1", "holder"], "value": "writer-1",
           "lease_id": lease}  # fmt: skip
    assert (await world.rest("post", "/api/txn", {"success": [put]})).status_code == 200
    revoked = await world.rest("delete", f"/api/leases/{lease}")
    assert revoked.status_code == 204, revoked.content
    shard = await sync_to_async(Shard.objects.get)(pk="w-held")
    assert shard.value == {"t1": {}} and shard.version == 3  # past what the schema allows
    released = await sync_to_async(
        lambda: AuditEntry.objects.filter(action=AuditAction.LEASE_RELEASED_PATH).last()
    )()
    assert released.shard_id == "w-held" and released.details["paths"] == [["t1", "holder"]]
    # Any agent's commit of such a value is refused as before.
    refused = await world.rest(
        "post", "/api/shards/w-held/commit", {"expected_version": 3, "new_value": {"t2": {}}}
    )
    assert refused.json()["error"]["code"] == "SCHEMA_VIOLATION"
    await world.observer.disconnect()
