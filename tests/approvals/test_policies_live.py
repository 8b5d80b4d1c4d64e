"""Standing approval policies under load, over real sockets (issue 28): every
request a policy matches is decided exactly once and applied at most once,
counted from the audit log."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from access.identity import Actor
from access.services import api_key_create
from approvals.models import ApprovalPolicy
from audit.models import AuditEntry
from shards.models import Shard
from shards.services import shard_create

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

SHARDS = [f"pol-race:{n}" for n in range(5)]
REQUESTS = 50


def test_fifty_concurrent_requests_under_a_policy_are_each_decided_once_and_applied_at_most_once(
    live_server_url,
):
    for shard_id in SHARDS:
        shard_create(
            actor=Actor("treasurer"),
            shard_id=shard_id,
            shard_type="decision",
            initial_value={"amount": 0},
            reversible=False,
        )
    _, officer = api_key_create(name="officer", permissions=["approval:policy"])
    _, executor = api_key_create(name="executor", permissions=["approval:request"])

    async def run() -> list[dict]:
        async with httpx.AsyncClient(base_url=live_server_url, timeout=60) as client:
            created = await client.post(
                "/api/approval-policies",
                headers={"X-API-Key": officer, "X-Agent-Id": "officer"},
                json={
                    "shard_prefix": "pol-race:",
                    "when": [{"path": ["amount"], "op": "<", "value": 100}],
                    "effect": "approve",
                    "ttl_seconds": 600,
                    "reason": "small payments",
                },
            )
            assert created.status_code == 201, created.text

            async def ask(n: int) -> dict:
                # Ten requests per shard, all naming version 1: at most one can apply.
                response = await client.post(
                    "/api/approvals/request",
                    headers={"X-API-Key": executor, "X-Agent-Id": "executor"},
                    json={
                        "shard_id": SHARDS[n % len(SHARDS)],
                        "proposed_value": {"amount": n},
                        "expected_version": 1,
                        "description": f"pay {n}",
                    },
                )
                assert response.status_code == 201, response.text
                return response.json()

            return await asyncio.gather(*(ask(n) for n in range(REQUESTS)))

    answers = asyncio.run(run())
    policy = ApprovalPolicy.objects.get()
    ids = {a["id"] for a in answers}
    assert len(ids) == REQUESTS
    assert {a["decided_by"] for a in answers} == {f"policy:{policy.id}"}
    assert Counter(a["status"] for a in answers) == {
        "committed": len(SHARDS),
        "approved_stale": REQUESTS - len(SHARDS),
    }

    # From the audit log: one decision per request, and never a second commit.
    decided = Counter(
        e.details["approval_id"] for e in AuditEntry.objects.filter(action="approval.approved")
    )
    assert set(decided) == ids and set(decided.values()) == {1}
    applied = Counter(
        e.details.get("approval_id")
        for e in AuditEntry.objects.filter(action="shard.commit", shard_id__in=SHARDS)
    )
    assert len(applied) == len(SHARDS) and set(applied.values()) == {1}
    assert set(applied) <= ids
    failed = AuditEntry.objects.filter(action="approval.commit_failed").count()
    assert failed == REQUESTS - len(SHARDS)
    for shard_id in SHARDS:
        assert Shard.objects.get(pk=shard_id).version == 2
