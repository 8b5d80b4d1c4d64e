"""File locks on a decision shard: ``{"path": {"holder", "expires_at"}}``.

Acquire is one compare-and-set: free, or held by a lock whose time has passed
(an abandoned lock), or already ours. Backoff between tries is exponential."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable
from typing import Any

from .client import ZeroLockClient
from .errors import NotFoundError
from .models import CreateShardOptions


class LockTimeout(TimeoutError):
    pass


class FileLock:
    def __init__(
        self,
        client: ZeroLockClient,
        locks_shard: str,
        agent_id: str | None = None,
        *,
        hold_seconds: float = 60.0,
    ):
        self.client = client
        self.shard = locks_shard
        self.agent_id = agent_id or client.agent_id
        self.hold_seconds = hold_seconds

    async def ensure_shard(self) -> None:
        try:
            await self.client.get_shard(self.shard)
        except NotFoundError:
            await self.client.create_shard(self.shard, CreateShardOptions(initial_value={}))

    async def try_acquire(self, path: str) -> bool:
        now = time.time()
        result = await self.client.txn(
            compare=[
                {"shard_id": self.shard, "path": [path, "expires_at"], "op": "<", "value": now}
            ],
            success=[self._put(path, now)],
            failure=[{"op": "get", "shard_id": self.shard, "path": [path]}],
        )
        if result.succeeded:
            return True  # it was abandoned: its time had passed
        held = result.responses[0]
        if not held["found"]:
            free = await self.client.txn(
                compare=[{"shard_id": self.shard, "path": [path], "op": "not_exists"}],
                success=[self._put(path, now)],
            )
            return free.succeeded
        if held["value"].get("holder") == self.agent_id:
            return (await self.client.txn(success=[self._put(path, now)])).succeeded
        return False

    def _put(self, path: str, now: float) -> dict[str, Any]:
        return {
            "op": "put",
            "shard_id": self.shard,
            "path": [path],
            "value": {"holder": self.agent_id, "expires_at": now + self.hold_seconds},
        }

    async def acquire(self, path: str, timeout_seconds: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_seconds
        delay = 0.02
        while not await self.try_acquire(path):
            if time.monotonic() + delay > deadline:
                raise LockTimeout(f"{path} is held by someone else")
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 1.0)

    async def release(self, path: str) -> bool:
        result = await self.client.txn(
            compare=[
                {
                    "shard_id": self.shard,
                    "path": [path, "holder"],
                    "op": "==",
                    "value": self.agent_id,
                }
            ],
            success=[{"op": "delete", "shard_id": self.shard, "path": [path]}],
        )
        return result.succeeded

    async def acquire_multiple(
        self, paths: Iterable[str], timeout_seconds: float = 30.0
    ) -> list[str]:
        """All or none, always in sorted order (so two agents cannot deadlock)."""
        held: list[str] = []
        try:
            for path in sorted(set(paths)):
                await self.acquire(path, timeout_seconds)
                held.append(path)
        except BaseException:
            for path in reversed(held):
                await self.release(path)
            raise
        return held


class FileLocker:
    """``async with FileLocker(lock, "src/app.py"): ...``"""

    def __init__(self, lock: FileLock, *paths: str, timeout_seconds: float = 30.0) -> None:
        self.lock, self.paths, self.timeout = lock, paths, timeout_seconds

    async def __aenter__(self) -> FileLocker:
        await self.lock.acquire_multiple(self.paths, self.timeout)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for path in sorted(set(self.paths), reverse=True):
            await self.lock.release(path)
