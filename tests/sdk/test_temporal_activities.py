"""The Temporal activities against a live server, run in Temporal's own
``ActivityEnvironment`` (no Temporal server): read, commit and claim, and a
retried attempt of one activity execution applied exactly once."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from tests.sdk.extras import require

require("temporalio", "temporal")

from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from access.services import api_key_create  # noqa: E402
from zerolock_sdk import CreateShardOptions, StaleCommitError, ZeroLockClient  # noqa: E402
from zerolock_sdk.temporal import (  # noqa: E402
    ClaimTask,
    CommitShard,
    ReadShard,
    RequestApproval,
    WaitForApproval,
    ZeroLockActivities,
    activity_idempotency_key,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def environment(workflow_id: str, activity_id: str, attempt: int = 1) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        workflow_id=workflow_id,
        workflow_run_id=f"{workflow_id}-run-1",
        activity_id=activity_id,
        attempt=attempt,
    )
    return env


def keys() -> tuple[str, str]:
    worker = api_key_create(name="worker", permissions=["shard:read", "shard:write"])[1]
    admin = api_key_create(name="temporal admin", permissions=["admin"])[1]
    return worker, admin


def test_a_retried_commit_activity_is_applied_exactly_once(live_server_url):
    worker_key, admin_key = keys()
    activities = ZeroLockActivities(live_server_url, agent_id="orders-wf", api_key=worker_key)

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin_key) as zl:
            await zl.create_shard("ledger", CreateShardOptions(initial_value={"total": 0}))
            commit = CommitShard("ledger", {"total": 100}, 1)

            first = await environment("order-7", "3", attempt=1).run(
                activities.commit_shard, commit
            )
            # The worker died before Temporal heard of that success: Temporal runs
            # attempt 2 of the same activity execution, with the same input.
            retried = await environment("order-7", "3", attempt=2).run(
                activities.commit_shard, commit
            )
            assert retried == first and first["version"] == 2
            history = await zl.history("ledger")
            assert [(h["version"], h["agent_id"]) for h in history] == [
                (1, "setup"),
                (2, "orders-wf"),
            ]
            # Without the activity's key, the same retry is an ordinary stale commit:
            # this is what the key saves the workflow from.
            async with ZeroLockClient(
                live_server_url, agent_id="orders-wf", api_key=worker_key
            ) as plain:
                with pytest.raises(StaleCommitError):
                    await plain.commit_shard("ledger", {"total": 100}, 1)
            # Another activity execution is another key: its stale commit is refused,
            # for good (retrying the same version can never succeed).
            with pytest.raises(ApplicationError) as refused:
                await environment("order-7", "4").run(activities.commit_shard, commit)
            assert refused.value.type == "STALE_VERSION" and refused.value.non_retryable
            assert len(await zl.history("ledger")) == 2

    asyncio.run(scenario())


def test_read_and_claim_activities_and_a_retried_claim_keeps_its_win(live_server_url):
    worker_key, admin_key = keys()
    activities = ZeroLockActivities(live_server_url, agent_id="wf-a", api_key=worker_key)
    rival = ZeroLockActivities(live_server_url, agent_id="wf-b", api_key=worker_key)

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin_key) as zl:
            tasks = {"job-1": {"status": "pending"}}
            await zl.create_shard("jobs", CreateShardOptions(initial_value=tasks))
            read = await environment("wf", "1").run(activities.read_shard, ReadShard("jobs"))
            assert read == {"shard_id": "jobs", "version": 1, "value": tasks}

            claim = ClaimTask("jobs", "job-1")
            won = await environment("wf", "2", attempt=1).run(activities.claim_task, claim)
            retried = await environment("wf", "2", attempt=3).run(activities.claim_task, claim)
            assert won == retried == {"task_id": "job-1", "claimed": True, "holder": "wf-a"}
            lost = await environment("wf-other", "2").run(rival.claim_task, claim)
            assert lost == {"task_id": "job-1", "claimed": False, "holder": "wf-a"}
            assert (await zl.get_shard("jobs")).version == 2  # one write, for the win

            with pytest.raises(ApplicationError) as missing:
                await environment("wf", "5").run(activities.read_shard, ReadShard("nowhere"))
            assert missing.value.type == "SHARD_NOT_FOUND" and missing.value.non_retryable

    asyncio.run(scenario())


def test_a_retried_approval_request_is_one_approval_and_the_wait_returns_its_decision(
    live_server_url,
):
    requester = api_key_create(name="wf", permissions=["shard:read", "approval:request"])[1]
    officer = api_key_create(name="officer", permissions=["shard:read", "approval:decide"])[1]
    admin = keys()[1]
    activities = ZeroLockActivities(live_server_url, agent_id="wf-a", api_key=requester)

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin) as zl:
            options = CreateShardOptions(initial_value={"limit": 1}, reversible=False)
            await zl.create_shard("limits", options)
            ask = RequestApproval("limits", {"limit": 2}, 1, "raise the limit")
            first = await environment("wf", "1", attempt=1).run(activities.request_approval, ask)
            retried = await environment("wf", "1", attempt=2).run(activities.request_approval, ask)
            assert retried == first and first["status"] == "pending"
            assert len(await zl.list_approvals(shard_id="limits")) == 1

            wait = WaitForApproval(first["approval_id"], poll_seconds=0.2)
            waiter, beats = environment("wf", "2"), []
            # The wait heartbeats, so Temporal can tell a dead worker's wait apart.
            waiter.on_heartbeat = lambda *details: beats.append(details)
            waiting = asyncio.create_task(waiter.run(activities.wait_for_approval, wait))
            await asyncio.sleep(0.5)
            assert not waiting.done() and beats  # nobody decided yet; it is alive
            async with ZeroLockClient(live_server_url, agent_id="bob", api_key=officer) as bob:
                await bob.approve(first["approval_id"], "fine")
            decided = await asyncio.wait_for(waiting, 10)
            assert decided["status"] == "approved" and decided["applied"]
            assert decided["commit"]["version"] == 2 and decided["decided_by"] == "agent:bob"
            assert (await zl.get_shard("limits")).value == {"limit": 2}

    asyncio.run(scenario())


def test_an_approval_outdated_before_its_decision_comes_back_stale_with_nothing_written(
    live_server_url,
):
    requester = api_key_create(name="wf", permissions=["shard:read", "approval:request"])[1]
    officer = api_key_create(name="officer", permissions=["shard:read", "approval:decide"])[1]
    admin = keys()[1]
    activities = ZeroLockActivities(live_server_url, agent_id="wf-a", api_key=requester)

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin) as zl:
            options = CreateShardOptions(initial_value={"limit": 1}, reversible=False)
            await zl.create_shard("limits", options)
            mine = await environment("wf", "1").run(
                activities.request_approval, RequestApproval("limits", {"limit": 2}, 1, "mine")
            )
            rival = await environment("wf-b", "1").run(
                activities.request_approval, RequestApproval("limits", {"limit": 3}, 1, "rival")
            )
            async with ZeroLockClient(live_server_url, agent_id="bob", api_key=officer) as bob:
                await bob.approve(rival["approval_id"], "first")  # the shard moves to v2
                await bob.approve(mine["approval_id"], "too late")
            decided = await environment("wf", "2").run(
                activities.wait_for_approval, WaitForApproval(mine["approval_id"])
            )
            # What a workflow reads to ask again on the new version.
            assert decided["status"] == "approved_stale" and not decided["applied"]
            assert decided["commit"]["error"] == "STALE_VERSION"
            assert (await zl.get_shard("limits")).value == {"limit": 3}

    asyncio.run(scenario())


def test_the_idempotency_key_ignores_the_attempt_and_fits_the_servers_limit():
    base = ActivityEnvironment.default_info()
    same = [dataclasses.replace(base, attempt=n) for n in (1, 2, 9)]
    assert len({activity_idempotency_key(info) for info in same}) == 1
    other = dataclasses.replace(base, activity_id="another")
    assert activity_idempotency_key(other) != activity_idempotency_key(base)
    long = dataclasses.replace(base, workflow_id="w" * 1000)
    assert len(activity_idempotency_key(long)) <= 255
    assert activity_idempotency_key(long) != activity_idempotency_key(
        dataclasses.replace(long, workflow_id="w" * 999)
    )
