"""A shard's owners are agent ids (issue 30, part 5): ``ops@team`` may act, so it
may be an owner. The owners list was validated as shard ids, which refuse
``@``: the shard could not be created (400), so no ``@`` agent could own one."""

from __future__ import annotations

import uuid

import httpx
import pytest

from access.services import api_key_create
from common.ids import AGENT_ID_REGEX, SHARD_ID_REGEX


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_an_agent_id_with_an_at_sign_can_own_an_owners_only_shard(live_server_url):
    _, raw = api_key_create(
        name="owners", permissions=["shard:read", "shard:write", "shard:create"]
    )
    shard_id = f"owned-{uuid.uuid4().hex[:6]}"

    def as_agent(agent: str) -> httpx.Client:
        return httpx.Client(
            base_url=live_server_url, headers={"X-API-Key": raw, "X-Agent-Id": agent}
        )

    with as_agent("ops@team") as ops, as_agent("intruder") as intruder:
        created = ops.post(
            "/api/shards",
            json={
                "id": shard_id,
                "type": "decision",
                "initial_value": 0,
                "owner_policy": "owners-only",
                "owners": ["ops@team"],
            },
        )
        assert created.status_code == 201, created.text
        assert created.json()["owners"] == ["ops@team"]

        refused = intruder.post(
            f"/api/shards/{shard_id}/commit", json={"expected_version": 1, "new_value": 1}
        )
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "NOT_AN_OWNER"

        committed = ops.post(
            f"/api/shards/{shard_id}/commit", json={"expected_version": 1, "new_value": 2}
        )
        assert committed.status_code == 200, committed.text
        assert committed.json()["version"] == 2


@pytest.mark.django_db
def test_an_owner_that_is_not_an_agent_id_is_refused(planner):
    response = planner.post(
        "/api/shards",
        {"id": "bad-owner", "type": "decision", "owner_policy": "owners-only", "owners": ["a b"]},
        format="json",
    )
    assert response.status_code == 400
    assert "owners" in response.json()["error"]["fields"]


@pytest.mark.django_db
def test_the_openapi_document_shows_owners_as_agent_ids(client):
    document = client.get("/api/schema?format=json").json()
    create = document["components"]["schemas"]["ShardCreate"]["properties"]
    assert create["owners"]["items"]["pattern"] == AGENT_ID_REGEX
    assert create["id"]["pattern"] == SHARD_ID_REGEX
