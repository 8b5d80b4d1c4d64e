"""Approvals against live processes: a race of approvers, the requester's push,
and expiry by a real Celery worker with beat."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
import websockets
from django.utils import timezone

from access.identity import Actor
from access.services import api_key_create
from approvals.models import Approval
from approvals.services import approval_request
from audit.models import AuditEntry
from shards.models import Shard
from shards.services import shard_create
from tests.conftest import ROOT, server_env

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def an_irreversible_shard(shard_id: str) -> None:
    shard_create(
        actor=Actor("treasurer"),
        shard_id=shard_id,
        shard_type="decision",
        initial_value={"paid": False},
        reversible=False,
    )


def test_twenty_approvers_at_once_decide_exactly_once_and_commit_once(live_server_url):
    an_irreversible_shard("race-vault")
    approval = approval_request(
        actor=Actor("executor"),
        shard_id="race-vault",
        proposed_value={"paid": True},
        expected_version=1,
        description="Pay once",
    )
    _, key = api_key_create(name="officers", permissions=["shard:read", "approval:decide"])

    async def approve(n: int) -> tuple[int, str]:
        async with httpx.AsyncClient(base_url=live_server_url, timeout=30) as client:
            response = await client.post(
                f"/api/approvals/{approval.id}/approve",
                headers={"X-API-Key": key, "X-Agent-Id": f"officer-{n}"},
            )
            body = response.json()
            return response.status_code, body.get("status") or body["error"]["code"]

    async def race() -> list[tuple[int, str]]:
        return await asyncio.gather(*(approve(n) for n in range(20)))

    outcomes = Counter(asyncio.run(race()))
    assert outcomes == {(200, "committed"): 1, (409, "APPROVAL_NOT_PENDING"): 19}
    shard = Shard.objects.get(pk="race-vault")
    assert (shard.version, shard.value) == (2, {"paid": True})
    assert AuditEntry.objects.filter(shard_id="race-vault", action="shard.commit").count() == 1
    assert Approval.objects.get(pk=approval.id).decisions.count() == 1


def test_the_requester_hears_approval_decided_on_its_socket(live_server_url):
    an_irreversible_shard("notify-vault")
    _, agent_key = api_key_create(
        name="executor", permissions=["shard:read", "approval:request"], agent_ids=["executor"]
    )
    _, officer_key = api_key_create(name="officer", permissions=["approval:decide"])
    ws_url = live_server_url.replace("http://", "ws://") + "/ws/agents/"

    async def scenario() -> tuple[dict, dict]:
        headers = {"X-API-Key": agent_key, "X-Agent-Id": "executor"}
        async with (
            websockets.connect(ws_url, additional_headers=headers) as executor,
            websockets.connect(
                ws_url, additional_headers={"X-API-Key": officer_key, "X-Agent-Id": "bystander"}
            ) as bystander,
            httpx.AsyncClient(base_url=live_server_url) as client,
        ):
            approvals = []
            for value in (True, "later"):
                response = await client.post(
                    "/api/approvals/request",
                    headers=headers,
                    json={
                        "shard_id": "notify-vault",
                        "proposed_value": {"paid": value},
                        "expected_version": 1,
                        "description": "Pay",
                    },
                )
                approvals.append(response.json()["id"])
            officer = {"X-API-Key": officer_key, "X-Agent-Id": "officer"}
            await client.post(f"/api/approvals/{approvals[0]}/approve", headers=officer)
            approved = json.loads(await asyncio.wait_for(executor.recv(), timeout=5))
            await client.post(
                f"/api/approvals/{approvals[1]}/reject", headers=officer, json={"reason": "dup"}
            )
            rejected = json.loads(await asyncio.wait_for(executor.recv(), timeout=5))
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(bystander.recv(), timeout=0.3)
            return approved, rejected

    approved, rejected = asyncio.run(scenario())
    assert approved["type"] == "approval_decided"
    assert approved["status"] == "committed" and approved["commit"]["version"] == 2
    assert (rejected["status"], rejected["reason"]) == ("rejected", "dup")


def test_a_real_celery_worker_expires_a_ten_second_approval_on_time(tmp_path):
    an_irreversible_shard("ttl-vault")
    approval = approval_request(
        actor=Actor("executor"),
        shard_id="ttl-vault",
        proposed_value={"paid": True},
        expected_version=1,
        description="Expires unanswered",
        ttl_seconds=10,
    )
    env = server_env()
    env["ZEROLOCK_DATA_DIR"] = str(tmp_path)  # its own SQLite broker
    log = Path(tmp_path) / "celery.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "zerolock_site",
                "worker",
                "--beat",
                "--concurrency=1",
                "--loglevel=INFO",
                f"--schedule={tmp_path / 'beat-schedule'}",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            approval.refresh_from_db()
            if approval.status == "expired":
                break
            assert worker.poll() is None, log.read_text()
            time.sleep(0.25)
        marked_at = timezone.now()
    finally:
        # What is tested is the expiry, not Celery's warm shutdown: that can take
        # 30 s restoring an unacknowledged message to the Redis broker (seen
        # under load), and bin/serve's supervisor bounds it with SIGKILL.
        worker.terminate()
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)
    assert approval.status == "expired", log.read_text()[-3000:]
    lateness = (approval.decided_at - approval.expires_at).total_seconds()
    assert 0 <= lateness <= 5, lateness
    assert (marked_at - approval.expires_at).total_seconds() <= 6
    assert AuditEntry.objects.filter(
        action="approval.expired", details__approval_id=approval.id
    ).exists()
    assert "approvals.tasks.expire_approvals" in log.read_text()
