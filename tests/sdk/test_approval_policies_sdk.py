"""The SDK's approval-policy methods against a live server (issue 28)."""

from __future__ import annotations

import pytest

from access.services import api_key_create
from zerolock_sdk import (
    CreateShardOptions,
    NotFoundError,
    PermissionDeniedError,
    SyncZeroLockClient,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_an_officer_creates_lists_and_deletes_a_policy_and_an_agent_is_approved_by_it(
    live_server_url,
):
    officer_key = api_key_create(name="officer", permissions=["approval:policy"])[1]
    agent_key = api_key_create(
        name="agent", permissions=["shard:read", "shard:create", "approval:request"]
    )[1]
    with (
        SyncZeroLockClient(live_server_url, agent_id="officer", api_key=officer_key) as officer,
        SyncZeroLockClient(live_server_url, agent_id="payer", api_key=agent_key) as agent,
    ):
        agent.create_shard(
            "pay:sdk", CreateShardOptions(initial_value={"amount": 0}, reversible=False)
        )
        policy = officer.create_approval_policy(
            shard_prefix="pay:",
            when=[{"path": ["amount"], "op": "<", "value": 100}],
            effect="approve",
            ttl_seconds=600,
            reason="routine payments",
        )
        assert [p["id"] for p in officer.list_approval_policies(live=True)] == [policy["id"]]
        assert officer.list_approval_policies(effect="reject") == []

        approval = agent.request_approval("pay:sdk", {"amount": 10}, 1, "pay 10")
        assert approval.applied and approval.decided_by == f"policy:{policy['id']}"

        officer.delete_approval_policy(policy["id"])
        with pytest.raises(NotFoundError):
            officer.get_approval_policy(policy["id"])
        with pytest.raises(PermissionDeniedError):
            agent.list_approval_policies()
