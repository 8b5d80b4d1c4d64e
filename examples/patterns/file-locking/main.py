"""File locking: agents editing shared files take locks first, in sorted order,
so none of them overwrite each other and none deadlock."""

from __future__ import annotations

import asyncio
import os
import random
import uuid

from zerolock_sdk import CreateShardOptions, ZeroLockClient
from zerolock_sdk.locks import FileLock, FileLocker

URL = os.environ.get("ZEROLOCK_URL", "http://127.0.0.1:8000")
KEY = os.environ.get("ZEROLOCK_API_KEY", "")
FILES = ["src/app.py", "src/models.py", "README.md"]


async def editor(name: str, locks: str, files: str, edits: int) -> None:
    async with ZeroLockClient(URL, agent_id=name, api_key=KEY) as zl:
        lock = FileLock(zl, locks)
        for _ in range(edits):
            wanted = random.sample(FILES, 2)
            async with FileLocker(lock, *wanted, timeout_seconds=30):
                # Read-modify-write of the "files" while holding their locks.
                shard = await zl.get_shard(files)
                value = dict(shard.value)
                for path in wanted:
                    value[path] = value[path] + 1
                await zl.commit(files, shard.version, value)


async def main() -> int:
    suffix = uuid.uuid4().hex[:6]
    locks, files = f"example.locks.{suffix}", f"example.files.{suffix}"
    async with ZeroLockClient(URL, agent_id="setup", api_key=KEY) as zl:
        await zl.create_shard(locks, CreateShardOptions(initial_value={}))
        await zl.create_shard(files, CreateShardOptions(initial_value=dict.fromkeys(FILES, 0)))
    agents, edits = 6, 5
    await asyncio.gather(*(editor(f"editor-{n}", locks, files, edits) for n in range(agents)))
    async with ZeroLockClient(URL, agent_id="setup", api_key=KEY) as zl:
        counts = (await zl.get_shard(files)).value
        leftover = (await zl.get_shard(locks)).value
    print(f"edit counts: {counts} (expected total {agents * edits * 2}); locks left: {leftover}")
    return 0 if sum(counts.values()) == agents * edits * 2 and not leftover else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
