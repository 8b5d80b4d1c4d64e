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
                minimal=True,
            )
            return free.succeeded
        if held["value"].get("holder") == self.agent_id:
            renewed = await self.client.txn(success=[self._put(path, now)], minimal=True)
            return renewed.succeeded
        return False

    def _put(self, path: str, now: float) -> dict[str, Any]:
        return {
            "op": "put",
            "shard_id": self.shard,
            "path": [path],
            "value": {"holder": self.agent_id, "expires_at": now + self.hold_seconds},
        }

    async def acquire(self, path: str, timeout_seconds: float = 30.0) -> bool:
        """True once held (so the seed's ``if not await lock.acquire(...)`` reads
        right); raises ``LockTimeout`` if still held by someone else at the end."""
        deadline = time.monotonic() + timeout_seconds
        delay = 0.02
        while not await self.try_acquire(path):
            if time.monotonic() + delay > deadline:
                raise LockTimeout(f"{path} is held by someone else")
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 1.0)
        return True

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
            minimal=True,
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
    """Holds locks for the length of an ``async with``, in two shapes:

    - ours: ``async with FileLocker(lock, "a.py", "b.py", timeout_seconds=30): ...``
      on a ``FileLock`` you already have;
    - the seed's: ``async with FileLocker(gateway, agent_id, locks_shard, file_path,
      timeout=30.0) as locker: ...``, which opens (and closes) its own client.

    A lock not had in time raises ``LockTimeout`` (a ``TimeoutError``)."""

    def __init__(
        self,
        lock: FileLock | str | None,
        *paths: str,
        timeout_seconds: float = 30.0,
        timeout: float | None = None,
    ) -> None:
        self.timeout = timeout if timeout is not None else timeout_seconds
        self._gateway: tuple[str | None, str, str] | None = None
        if isinstance(lock, FileLock):
            self.lock: FileLock | None = lock
            self.paths = paths
        else:  # the seed's (gateway, agent_id, locks_shard, file_path)
            if len(paths) != 3:
                raise TypeError("FileLocker(gateway, agent_id, locks_shard, file_path)")
            agent_id, locks_shard, file_path = paths
            self.lock, self.paths = None, (file_path,)
            self._gateway = (lock, agent_id, locks_shard)
        self._own_client: ZeroLockClient | None = None

    async def __aenter__(self) -> FileLocker:
        if self._gateway is not None:
            gateway, agent_id, locks_shard = self._gateway
            self._own_client = ZeroLockClient(gateway, agent_id=agent_id)
            self.lock = FileLock(self._own_client, locks_shard, agent_id)
        assert self.lock is not None
        try:
            await self.lock.acquire_multiple(self.paths, self.timeout)
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.lock is not None
        try:
            for path in sorted(set(self.paths), reverse=True):
                await self.lock.release(path)
        finally:
            await self._close()

    async def _close(self) -> None:
        if self._own_client is not None:
            await self._own_client.close()
            self._own_client = None
