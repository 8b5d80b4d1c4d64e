"""A client that serves reads from memory while they are fresh.

An entry is Fresh until the server says otherwise (an ``invalidate`` push on
/ws/agents/ for a shard this client read) or, with ``ttl``, until it is older
than that. Writes always go to the server, and a commit's 200 refreshes the
entry. Without a socket the cache still honours ``ttl`` (None: no caching)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import websockets

from .client import ZeroLockClient
from .models import CommitResult, Shard


@dataclass
class _Entry:
    shard: Shard
    at: float
    fresh: bool = True


class CachedZeroLockClient(ZeroLockClient):
    def __init__(
        self,
        base_url: str,
        *,
        ws_url: str | None = None,
        auto_connect_ws: bool = True,
        ttl: float | None = None,
        **options: Any,
    ) -> None:
        super().__init__(base_url, **options)
        self._ws_url = ws_url or self.ws_url
        self.ttl = ttl
        self._entries: dict[str, _Entry] = {}
        self._socket: Any = None
        self._listener: asyncio.Task | None = None
        self._auto = auto_connect_ws
        self._on_conflict: Callable[[dict[str, Any]], Any] | None = None
        self.cache_hits = 0

    async def __aenter__(self) -> CachedZeroLockClient:
        if self._auto:
            await self.connect_ws()
        return self

    async def connect_ws(self) -> None:
        headers = {"X-API-Key": self.api_key, "X-Agent-Id": self.agent_id}
        self._socket = await websockets.connect(self._ws_url, additional_headers=headers)
        self._listener = asyncio.get_running_loop().create_task(self._listen())
        if self._entries:
            await self._socket.send(
                json.dumps({"type": "subscribe", "shard_ids": sorted(self._entries)})
            )

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
        if self._socket is not None:
            await self._socket.close()
        await super().close()

    def set_on_conflict(self, callback: Callable[[dict[str, Any]], Any]) -> None:
        """``callback(event)`` for each ``conflict_notify``: shard_id, version,
        winning_value, rejected_value, diff."""
        self._on_conflict = callback

    def _usable(self, entry: _Entry | None) -> bool:
        if entry is None or not entry.fresh:
            return False
        if self._socket is None:
            return self.ttl is not None and time.monotonic() - entry.at < self.ttl
        return self.ttl is None or time.monotonic() - entry.at < self.ttl

    def is_fresh(self, shard_id: str) -> bool:
        return self._usable(self._entries.get(shard_id))

    async def get_shard(self, shard_id: str) -> Shard:
        entry = self._entries.get(shard_id)
        if self._usable(entry):
            self.cache_hits += 1
            return entry.shard
        shard = await super().get_shard(shard_id)
        new = shard_id not in self._entries
        self._entries[shard_id] = _Entry(shard, time.monotonic())
        if new and self._socket is not None:
            await self._socket.send(json.dumps({"type": "subscribe", "shard_ids": [shard_id]}))
        return shard

    async def commit(
        self, shard_id: str, expected_version: int, new_value: Any, **kwargs: Any
    ) -> CommitResult:
        try:
            result = await super().commit(shard_id, expected_version, new_value, **kwargs)
        except Exception:
            self.invalidate(shard_id)
            raise
        entry = self._entries.get(shard_id)
        if entry is not None:
            raw = {**entry.shard.raw, "value": result.value, "version": result.version}
            self._entries[shard_id] = _Entry(Shard.from_json(raw), time.monotonic())
        return result

    def invalidate(self, shard_id: str) -> None:
        entry = self._entries.get(shard_id)
        if entry is not None:
            entry.fresh = False

    async def _listen(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in self._socket:
                event = json.loads(message)
                if event.get("type") == "invalidate":
                    entry = self._entries.get(event["shard_id"])
                    if entry is not None and entry.shard.version < event["version"]:
                        entry.fresh = False
                elif event.get("type") == "conflict_notify":
                    self.invalidate(event["shard_id"])
                    if self._on_conflict is not None:
                        outcome = self._on_conflict(event)
                        if asyncio.iscoroutine(outcome):
                            await outcome
        self._socket = None  # fall back to ttl (or no caching)
