"""A synchronous twin of ``ZeroLockClient`` for scripts: the same methods,
blocking. The async client runs on a private event loop in a background thread,
so there is one implementation of every call."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from typing import Any

from .client import ZeroLockClient


class SyncZeroLockClient:
    """``with SyncZeroLockClient(url, agent_id="script", api_key=KEY) as zl: zl.get_shard("x")``"""

    def __init__(self, base_url: str | None = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="zerolock-sync", daemon=True
        )
        self._thread.start()
        self._client: ZeroLockClient = self._call(self._make(base_url, options))

    @staticmethod
    async def _make(base_url: str | None, options: dict[str, Any]) -> ZeroLockClient:
        return ZeroLockClient(base_url, **options)

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def call(self, helper: Any, *args: Any, **kwargs: Any) -> Any:
        """Runs an async helper that takes a client first (``claim_task``,
        ``get_pending_tasks``, ...) on this client, blocking:
        ``zl.call(claim_task, "queue", "t1")``."""
        return self._call(helper(self._client, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if inspect.isasyncgenfunction(attribute):
            raise AttributeError(f"{name} streams; use the async ZeroLockClient for it")
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        @functools.wraps(attribute)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._call(attribute(*args, **kwargs))

        return blocking

    def close(self) -> None:
        if self._loop.is_running():
            self._call(self._client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def __enter__(self) -> SyncZeroLockClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
