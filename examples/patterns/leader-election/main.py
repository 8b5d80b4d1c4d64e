"""Leader election on a lease: one manager at a time; when it stops keeping its
lease alive, its name disappears and a standby takes over. Writes carry the
lease's fence, so a leader that lost its lease cannot overwrite its successor."""

from __future__ import annotations

import asyncio
import os
import uuid

from zerolock_sdk import CreateShardOptions, FencedError, ZeroLockClient

URL = os.environ.get("ZEROLOCK_URL", "http://127.0.0.1:8000")
KEY = os.environ.get("ZEROLOCK_API_KEY", "")
TTL = 2


async def campaign(zl: ZeroLockClient, cluster: str, lease_id: str, fence: int) -> bool:
    result = await zl.txn(
        compare=[{"shard_id": cluster, "path": ["leader"], "op": "not_exists"}],
        success=[
            {
                "op": "put",
                "shard_id": cluster,
                "path": ["leader"],
                "value": zl.agent_id,
                "lease_id": lease_id,
            }
        ],
        fence=fence,
    )
    return result.succeeded


async def node(name: str, cluster: str, log: list[str], lead_for: float, wake_up: bool) -> None:
    async with ZeroLockClient(URL, agent_id=name, api_key=KEY) as zl:
        lease = await zl.grant_lease(TTL)
        while not await campaign(zl, cluster, lease.id, lease.fence):
            await zl.keepalive(lease.id)
            await asyncio.sleep(0.2)
        log.append(name)
        print(f"{name} is the leader (fence {lease.fence})")
        end = asyncio.get_running_loop().time() + lead_for
        while asyncio.get_running_loop().time() < end:
            await zl.keepalive(lease.id)
            await asyncio.sleep(0.3)
        print(f"{name} stops keeping its lease alive (a crash)")
        if not wake_up:
            return
        await asyncio.sleep(TTL + 1.5)
        shard = await zl.get_shard(cluster)
        try:  # the old leader wakes up and writes with its old fence
            await zl.commit(
                cluster,
                shard.version,
                {**shard.value, "note": f"{name} was here"},
                fence=lease.fence,
            )
            print(f"{name}: stale write accepted (wrong!)")
        except FencedError as fenced:
            print(f"{name}: stale write refused: {fenced.code}")


async def main() -> int:
    cluster = f"example.cluster.{uuid.uuid4().hex[:6]}"
    async with ZeroLockClient(URL, agent_id="setup", api_key=KEY) as zl:
        await zl.create_shard(cluster, CreateShardOptions(initial_value={}))
    log: list[str] = []
    first = asyncio.create_task(node("manager-a", cluster, log, lead_for=1.0, wake_up=True))
    await asyncio.sleep(0.3)
    second = asyncio.create_task(node("manager-b", cluster, log, lead_for=3.0, wake_up=False))
    await asyncio.gather(first, second)
    print(f"leaders in order: {log}")
    return 0 if log == ["manager-a", "manager-b"] else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
