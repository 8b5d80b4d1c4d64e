"""A Temporal workflow coordinating through ZeroLock activities.

``PayoutWorkflow`` claims a payout task and adds it to a shared ledger shard:
read, decide, commit, and on a stale version read again. The activities come
from ``zerolock_sdk.temporal``; each write carries the activity execution's
Idempotency-Key, so when Temporal retries an attempt whose result it never got,
the server replays the first answer and the payout is booked once.

    python main.py --local          # no Temporal server: the activities run in
                                    # Temporal's ActivityEnvironment, including a
                                    # retried commit attempt
    python main.py --address HOST:7233   # a real Temporal server: a worker runs
                                         # the workflow (not exercised by the tests)

Needs the temporal extra: pip install -e ".[temporal]"."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from zerolock_sdk import CreateShardOptions, ZeroLockClient
    from zerolock_sdk.temporal import ClaimTask, CommitShard, ReadShard, ZeroLockActivities

STEP = {"start_to_close_timeout": timedelta(seconds=10), "retry_policy": RetryPolicy()}


@workflow.defn
class PayoutWorkflow:
    @workflow.run
    async def run(self, ledger: str, queue: str, payout: str, amount: int) -> dict:
        claim = await workflow.execute_activity(
            "zerolock.claim_task", ClaimTask(queue, payout), **STEP
        )
        if not claim["claimed"]:
            return {"booked": False, "holder": claim["holder"]}
        while True:
            shard = await workflow.execute_activity(
                "zerolock.read_shard", ReadShard(ledger), **STEP
            )
            value = {**shard["value"], payout: amount}
            try:
                done = await workflow.execute_activity(
                    "zerolock.commit_shard", CommitShard(ledger, value, shard["version"]), **STEP
                )
                return {"booked": True, "version": done["version"]}
            except ActivityError as error:
                cause = error.cause
                if not (isinstance(cause, ApplicationError) and cause.type == "STALE_VERSION"):
                    raise
                # Someone booked in between: read the ledger again and re-apply.


async def local(agent: str) -> None:
    """The activities under Temporal's ActivityEnvironment (no server needed)."""
    from temporalio.testing import ActivityEnvironment

    run = uuid.uuid4().hex[:6]
    ledger, queue = f"example.temporal.{run}.ledger", f"example.temporal.{run}.payouts"
    activities = ZeroLockActivities(agent_id=agent)
    async with ZeroLockClient(agent_id=f"{agent}-setup") as zl:
        await zl.create_shard(ledger, CreateShardOptions(initial_value={}))
        await zl.create_shard(
            queue, CreateShardOptions(initial_value={"p-1": {"status": "pending"}})
        )

        def attempt(activity_id: str, number: int) -> ActivityEnvironment:
            env = ActivityEnvironment()
            env.info = dataclasses.replace(
                env.info, workflow_id=f"payout-{run}", activity_id=activity_id, attempt=number
            )
            return env

        claim = await attempt("1", 1).run(activities.claim_task, ClaimTask(queue, "p-1"))
        print(f"claim: {claim}")
        shard = await attempt("2", 1).run(activities.read_shard, ReadShard(ledger))
        booking = CommitShard(ledger, {"p-1": 250}, shard["version"])
        first = await attempt("3", 1).run(activities.commit_shard, booking)
        print(f"commit attempt 1: version {first['version']}")
        # The worker "dies" before reporting: Temporal retries the same execution.
        second = await attempt("3", 2).run(activities.commit_shard, booking)
        print(f"commit attempt 2 (retry): version {second['version']} (replayed)")
        history = await zl.history(ledger)
        print(f"ledger versions: {[h['version'] for h in history]} -> booked once")
        print(f"ledger now: {(await zl.get_shard(ledger)).value}")


async def with_server(address: str, agent: str) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    run = uuid.uuid4().hex[:6]
    ledger, queue = f"example.temporal.{run}.ledger", f"example.temporal.{run}.payouts"
    async with ZeroLockClient(agent_id=f"{agent}-setup") as zl:
        await zl.create_shard(ledger, CreateShardOptions(initial_value={}))
        await zl.create_shard(
            queue, CreateShardOptions(initial_value={"p-1": {"status": "pending"}})
        )
    client = await Client.connect(address)
    activities = ZeroLockActivities(agent_id=agent)
    async with Worker(
        client,
        task_queue=f"zerolock-{run}",
        workflows=[PayoutWorkflow],
        activities=activities.all(),
    ):
        result = await client.execute_workflow(
            PayoutWorkflow.run,
            args=[ledger, queue, "p-1", 250],
            id=f"payout-{run}",
            task_queue=f"zerolock-{run}",
        )
    print(f"workflow result: {result}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", action="store_true")
    where.add_argument("--address")
    parser.add_argument("--agent", default="payout-worker")
    args = parser.parse_args()
    if args.local:
        asyncio.run(local(args.agent))
    else:
        asyncio.run(with_server(args.address, args.agent))
