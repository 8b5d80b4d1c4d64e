"""Task claiming: many agents, one queue, every task done exactly once.

Each claim is one request: the server picks a pending task, marks it claimed
by the worker and answers with it, or says nothing is left (no worker ever
loses a request to another's claim). Claims are bound to a lease per worker;
with --reaper, a worker "crashes" holding tasks, and when its lease expires the
server frees them (the holder disappears), so a reaper puts those tasks back to
pending."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import uuid

from zerolock_sdk import CreateShardOptions, ZeroLockClient
from zerolock_sdk.task_claim import claim_next, complete_task

URL = os.environ.get("ZEROLOCK_URL", "http://127.0.0.1:8000")
KEY = os.environ.get("ZEROLOCK_API_KEY", "")


async def worker(name: str, queue: str, done: list[str], crash_after: int | None = None) -> int:
    async with ZeroLockClient(URL, agent_id=name, api_key=KEY) as zl:
        lease = await zl.grant_lease(2 if crash_after is not None else 30)
        claimed = 0
        while result := await claim_next(zl, queue, lease_id=lease.id):
            claimed += 1
            if crash_after is not None and claimed > crash_after:
                print(f"  {name} crashed holding {result.task_id}")
                return claimed  # no keep-alive, no completion: the lease will expire
            await asyncio.sleep(random.uniform(0, 0.01))  # the work
            if await complete_task(zl, queue, result.task_id, result=f"done by {name}"):
                done.append(result.task_id)
        await zl.revoke_lease(lease.id)
        return claimed


async def reap(queue: str) -> list[str]:
    """Tasks still 'claimed' whose holder (bound to a lease) is gone go back to pending."""
    async with ZeroLockClient(URL, agent_id="reaper", api_key=KEY) as zl:
        shard = await zl.get_shard(queue)
        orphans = [
            t for t, v in shard.value.items() if v["status"] == "claimed" and "holder" not in v
        ]
        for task in orphans:
            await zl.txn(
                compare=[
                    {"shard_id": queue, "path": [task, "holder"], "op": "not_exists"},
                    {"shard_id": queue, "path": [task, "status"], "op": "==", "value": "claimed"},
                ],
                success=[
                    {"op": "put", "shard_id": queue, "path": [task, "status"], "value": "pending"}
                ],
            )
        return orphans


async def main(agents: int, tasks: int, reaper: bool) -> int:
    queue = f"example.tasks.{uuid.uuid4().hex[:6]}"
    async with ZeroLockClient(URL, agent_id="boss", api_key=KEY) as zl:
        await zl.create_shard(
            queue,
            CreateShardOptions(
                initial_value={f"t{n:03}": {"status": "pending"} for n in range(tasks)}
            ),
        )
    print(f"queue {queue}: {tasks} tasks, {agents} agents")
    done: list[str] = []
    if reaper:
        await worker("crashy", queue, done, crash_after=2)
        print("  waiting for the crashed worker's lease to expire...")
        await asyncio.sleep(3)
        orphans = await reap(queue)
        print(f"  reaper put back {len(orphans)} orphaned task(s): {orphans}")
    await asyncio.gather(*(worker(f"agent-{n}", queue, done) for n in range(agents)))
    async with ZeroLockClient(URL, agent_id="boss", api_key=KEY) as zl:
        final = (await zl.get_shard(queue)).value
    finished = sorted(t for t, v in final.items() if v["status"] == "done")
    duplicates = len(done) - len(set(done))
    print(f"done: {len(finished)}/{tasks}, completed twice: {duplicates}")
    return 0 if len(finished) == tasks and duplicates == 0 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--reaper", action="store_true", help="crash a worker and reap its tasks")
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.agents, args.tasks, args.reaper)))
