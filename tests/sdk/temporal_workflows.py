"""The workflows tests/sdk/test_temporal_workflows.py runs on a real Temporal dev
server, and the worker it runs in a subprocess to kill (``python -m
tests.sdk.temporal_workflows``). Not a test module: a worker process imports it
without pytest or Django."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from zerolock_sdk.temporal import (
        ClaimTask,
        CommitShard,
        ReadShard,
        RequestApproval,
        ZeroLockActivities,
        request_and_wait_for_approval,
    )

# Short timeouts so that a killed worker's activity is retried within seconds:
# the commit's start_to_close_timeout is how long Temporal waits for a dead worker.
STEP: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=4),
    "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=200)),
}


@workflow.defn
class ClaimWorkflow:
    """Claims one named task; the holder is this workflow, not its worker."""

    @workflow.run
    async def run(self, queue: str, task_id: str) -> dict[str, Any]:
        me = workflow.info().workflow_id
        claimed: dict[str, Any] = await workflow.execute_activity(
            "zerolock.claim_task", ClaimTask(queue, task_id, holder=me), **STEP
        )
        return claimed


@workflow.defn
class ApprovedChangeWorkflow:
    """Proposes ``key: value`` on a shard and waits for a person to decide; the
    approval, once granted, is the commit (the server applies it)."""

    @workflow.run
    async def run(self, shard_id: str, key: str, value: Any, poll_seconds: float) -> dict[str, Any]:
        shard = await workflow.execute_activity("zerolock.read_shard", ReadShard(shard_id), **STEP)
        request = RequestApproval(
            shard_id,
            {**shard["value"], key: value},
            shard["version"],
            f"{workflow.info().workflow_id}: set {key}",
            ttl_seconds=600,
        )
        return await request_and_wait_for_approval(
            request, poll_seconds=poll_seconds, heartbeat_timeout=timedelta(seconds=5)
        )


@workflow.defn
class BookWorkflow:
    """Claims a payout and books it on a ledger: read, commit, and read again on a
    stale version."""

    @workflow.run
    async def run(self, ledger: str, queue: str, payout: str, amount: int) -> dict[str, Any]:
        me = workflow.info().workflow_id
        claim = await workflow.execute_activity(
            "zerolock.claim_task", ClaimTask(queue, payout, holder=me), **STEP
        )
        if not claim["claimed"]:
            return {"booked": False, "holder": claim["holder"]}
        while True:
            shard = await workflow.execute_activity(
                "zerolock.read_shard", ReadShard(ledger), **STEP
            )
            booking = CommitShard(ledger, {**shard["value"], payout: amount}, shard["version"])
            try:
                done = await workflow.execute_activity("zerolock.commit_shard", booking, **STEP)
                return {"booked": True, "version": done["version"]}
            except ActivityError as error:
                cause = error.cause
                if not (isinstance(cause, ApplicationError) and cause.type == "STALE_VERSION"):
                    raise


class RecordedActivities(ZeroLockActivities):
    """The adapter's activities, with the commit recorded to a file (attempt,
    process and answer), and with ``block_after_commit`` a commit that returns nothing after
    the server applied it: the window in which a worker death leaves Temporal
    retrying a write that already happened. Test-only: the adapter has no hook."""

    def __init__(self, log_path: str, block_after_commit: bool, **options: Any) -> None:
        super().__init__(**options)
        self._log_path = log_path
        self._block = block_after_commit

    @activity.defn(name="zerolock.commit_shard")
    async def commit_shard(self, request: CommitShard) -> dict[str, Any]:
        done = await super().commit_shard(request)
        with open(self._log_path, "a") as log:
            attempt = {"attempt": activity.info().attempt, "pid": os.getpid()}
            log.write(json.dumps({**attempt, **done}) + "\n")
        if self._block:
            await asyncio.Event().wait()  # until the test kills this process
        return done


async def serve(args: argparse.Namespace) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    client = await Client.connect(args.address)
    activities = RecordedActivities(
        args.log,
        args.block_after_commit,
        base_url=args.url,
        agent_id=args.agent,
        api_key=os.environ["ZEROLOCK_API_KEY"],
    )
    # No sticky cache: after a kill, the next workflow task goes to the new worker
    # at once instead of waiting out the dead worker's sticky queue.
    async with Worker(
        client,
        task_queue=args.task_queue,
        workflows=[BookWorkflow, ApprovedChangeWorkflow],
        activities=activities.all(),
        max_cached_workflows=0,
    ):
        print("worker ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--block-after-commit", action="store_true")
    asyncio.run(serve(parser.parse_args()))
