"""A shard's values reach only keys with shard:read (issue 25, M5): shard:write,
approval:request or approval:decide alone are no way to read them, through a
409, an approval, a write's answer or a conflict_notify."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.test import APIClient

from access.identity import Actor
from access.services import api_key_create
from shards.services import shard_commit, shard_create
from zerolock_site.asgi import application

pytestmark = pytest.mark.django_db

SECRET = {"payroll": 123_456}


def ledger_at_version_two() -> None:
    shard = shard_create(actor=Actor("cfo"), shard_id="ledger", shard_type="decision")
    shard_commit(actor=Actor("cfo"), shard=shard, expected_version=1, new_value=SECRET)


@pytest.fixture
def ledger(db) -> None:
    ledger_at_version_two()


def stale_commit(client) -> dict:
    answer = client.post(
        "/api/shards/ledger/commit",
        {"expected_version": 1, "new_value": {"payroll": 0}},
        format="json",
    )
    assert answer.status_code == 409, answer.content
    return answer.json()["error"]


def test_a_stale_commit_shows_the_current_value_only_to_a_key_that_may_read(
    ledger, make_key, client_for
):
    writer = client_for(make_key("shard:write"), agent="clerk")
    reader = client_for(make_key("shard:write", "shard:read"), agent="auditor")
    hidden, shown = stale_commit(writer), stale_commit(reader)
    assert "current_value" not in hidden and hidden["current_version"] == 2
    assert shown["current_value"] == SECRET


def test_an_approval_shows_its_value_at_request_and_diff_only_to_a_key_that_may_read(
    ledger, make_key, client_for
):
    body = {"shard_id": "ledger", "expected_version": 2, "proposed_value": {"payroll": 1},
            "description": "raise"}  # fmt: skip
    asker = client_for(make_key("approval:request"), agent="clerk")
    asked = asker.post("/api/approvals/request", body, format="json").json()
    assert (asked["value_at_request"], asked["diff"]) == (None, None)
    assert asked["diff_omitted"] == "not_readable" and asked["proposed_value"] == {"payroll": 1}
    decider = client_for(make_key("approval:decide"), agent="boss")
    decided = decider.post(f"/api/approvals/{asked['id']}/reject", {"reason": "no"}, format="json")
    assert decided.status_code == 200, decided.content
    assert (decided.json()["value_at_request"], decided.json()["diff"]) == (None, None)
    reader = client_for(make_key("approval:request", "shard:read"), agent="auditor")
    seen = reader.get(f"/api/approvals/{asked['id']}").json()
    assert seen["value_at_request"] == SECRET and seen["diff"]


def test_writes_answer_without_values_to_a_key_that_may_not_read(db, make_key, client_for):
    shard_create(actor=Actor("a"), shard_id="board", shard_type="additive", crdt_type="map",
                 initial_value=SECRET)  # fmt: skip
    shard_create(actor=Actor("a"), shard_id="queue", shard_type="decision",
                 initial_value={"t1": {"status": "pending", "secret": 1}, "t2": {"x": SECRET}})  # fmt: skip
    writer = client_for(make_key("shard:write"), agent="clerk")
    merged = writer.post("/api/shards/board/commit", {"new_value": {"mine": 1}}, format="json")
    assert merged.status_code == 200 and "value" not in merged.json()
    claim = writer.post("/api/shards/queue/claim", {"where": {"status": "pending"},
                        "set": {"status": "claimed"}}, format="json")  # fmt: skip
    assert claim.status_code == 200 and "value" not in claim.json()
    assert claim.json()["task"]["status"] == "claimed"  # what it claimed, it may see
    reader = client_for(make_key("shard:write", "shard:read"), agent="auditor")
    seen = reader.post("/api/shards/board/commit", {"new_value": {"b": 2}}, format="json")
    assert seen.json()["value"] == {**SECRET, "mine": 1, "b": 2}


@pytest.mark.django_db(transaction=True)
async def test_conflict_notify_names_no_winning_value_to_a_key_that_may_not_read():
    await sync_to_async(ledger_at_version_two)()
    writer, writer_raw = await sync_to_async(api_key_create)(name="w", permissions=["shard:write"])
    reader, reader_raw = await sync_to_async(api_key_create)(
        name="r", permissions=["shard:write", "shard:read"]
    )
    notices = []
    for raw, agent in ((writer_raw, "clerk"), (reader_raw, "auditor")):
        socket = WebsocketCommunicator(
            application,
            "/ws/agents/",
            headers=[(b"x-api-key", raw.encode()), (b"x-agent-id", agent.encode())],
        )
        assert (await socket.connect())[0]
        client = APIClient()
        client.credentials(HTTP_X_API_KEY=raw, HTTP_X_AGENT_ID=agent)
        await sync_to_async(stale_commit)(client)
        notices.append(await socket.receive_json_from(timeout=5))
        await socket.disconnect()
    hidden, shown = notices
    assert hidden["type"] == "conflict_notify" and hidden["rejected_value"] == {"payroll": 0}
    assert "winning_value" not in hidden and "diff" not in hidden
    assert shown["winning_value"] == SECRET and shown["diff"]
