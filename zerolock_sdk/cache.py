"""A client that serves reads from memory while they are fresh.

An entry is Fresh until the server says otherwise (an ``invalidate`` push on
/ws/agents/ for a shard this client read) or, with ``ttl``, until it is older
than that. Writes always go to the server, and a commit's 200 refreshes the
entry. Without a socket the cache still honours ``ttl`` (None: no caching).
Connected, reads and writes go over the same socket (``ZeroLockClient.connect_ws``),
and when it closes the client goes over HTTP and reconnects by itself.

The seed's options are all here: ``ws_url`` (default: the server's
/ws/agents/), ``auto_connect_ws`` (default True here; with False, call
``connect_ws()`` yourself), and the TTL as ``ttl`` seconds or ``ttl_ms``."""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .client import ZeroLockClient
from .models import CommitResult, Shard
from .transport import SocketDown

logger = logging.getLogger("zerolock_sdk")


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
        ttl_ms: float | None = None,
        **options: Any,
    ) -> None:
        super().__init__(base_url, **options)
        if ttl is not None and ttl_ms is not None:
            raise TypeError("pass ttl (seconds) or ttl_ms, not both")
        self._ws_url = ws_url or self.ws_url
        self.ttl = ttl_ms / 1000 if ttl_ms is not None else ttl
        self._entries: dict[str, _Entry] = {}
        self._auto = auto_connect_ws
        self._on_conflict: Callable[..., Any] | None = None
        self._conflict_spread = False
        self.cache_hits = 0

    async def __aenter__(self) -> CachedZeroLockClient:
        if self._auto:
            await self.connect_ws()
        return self

    def _socket_url(self) -> str:
        return self._ws_url

    async def _socket_opened(self) -> None:
        # A new connection holds no subscriptions, and what changed while there
        # was none went unheard: every entry is read again, and subscribed to.
        for entry in self._entries.values():
            entry.fresh = False
        if self._entries and self._socket is not None:
            await self._socket.send_json({"type": "subscribe", "shard_ids": sorted(self._entries)})

    def set_on_conflict(self, callback: Callable[..., Any]) -> None:
        """Called (sync or async) for each ``conflict_notify`` this agent gets.
        A callback taking one argument gets the event dict (``shard_id``,
        ``version``, ``winning_value``, ``rejected_value``, ``diff``); one taking
        more, or ``*args``, gets the seed's five: ``(shard_id, version, winning,
        rejected, diff)``."""
        self._on_conflict = callback
        self._conflict_spread = _takes_five(callback)

    def _usable(self, entry: _Entry | None) -> bool:
        if entry is None or not entry.fresh:
            return False
        if not self.socket_open:
            return self.ttl is not None and time.monotonic() - entry.at < self.ttl
        return self.ttl is None or time.monotonic() - entry.at < self.ttl

    def is_fresh(self, shard_id: str) -> bool:
        return self._usable(self._entries.get(shard_id))

    async def get_shard(self, shard_id: str) -> Shard:
        entry = self._entries.get(shard_id)
        if entry is not None and self._usable(entry):
            self.cache_hits += 1
            return entry.shard
        shard = await super().get_shard(shard_id)
        new = shard_id not in self._entries
        self._entries[shard_id] = _Entry(shard, time.monotonic())
        if new and self._socket is not None:
            # Down now: it subscribes to every entry's shard when it reopens.
            with contextlib.suppress(SocketDown):
                await self._socket.send_json({"type": "subscribe", "shard_ids": [shard_id]})
        return shard

    async def commit(
        self, shard_id: str, expected_version: int, new_value: Any, **kwargs: Any
    ) -> CommitResult:
        try:
            result = await super().commit(shard_id, expected_version, new_value, **kwargs)
        except Exception:
            self.invalidate(shard_id)
            raise
        if kwargs.get("minimal"):  # no value came back to refresh the entry with
            self.invalidate(shard_id)
            return result
        entry = self._entries.get(shard_id)
        if entry is not None:
            raw = {**entry.shard.raw, "value": result.value, "version": result.version}
            self._entries[shard_id] = _Entry(Shard.from_json(raw), time.monotonic())
        return result

    def invalidate(self, shard_id: str) -> None:
        entry = self._entries.get(shard_id)
        if entry is not None:
            entry.fresh = False

    async def _pushed(self, event: dict[str, Any]) -> None:
        """A push on the socket (its reader, ``AgentSocket``, routes the answers
        to requests and hands every other frame here, in order)."""
        if event.get("type") == "invalidate":
            entry = self._entries.get(event["shard_id"])
            version = event.get("version")
            if entry is not None and (version is None or entry.shard.version < version):
                entry.fresh = False  # a newer version, or the shard was deleted
        elif event.get("type") == "conflict_notify":
            self.invalidate(event["shard_id"])
            if self._on_conflict is not None:
                await self._call_on_conflict(event)

    async def _call_on_conflict(self, event: dict[str, Any]) -> None:
        # A failing callback is logged, not raised: raising here would end the
        # listener, and with it every invalidation this cache relies on.
        callback = self._on_conflict
        if callback is None:
            return
        try:
            outcome = (
                callback(
                    event["shard_id"],
                    event.get("version"),
                    event.get("winning_value"),
                    event.get("rejected_value"),
                    event.get("diff"),
                )
                if self._conflict_spread
                else callback(event)
            )
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            logger.exception("on_conflict callback failed for %s", event.get("shard_id"))


def _takes_five(callback: Callable[..., Any]) -> bool:
    """Whether a conflict callback wants the seed's five arguments rather than
    the event dict: it has ``*args`` or more than one positional parameter."""
    try:
        parameters = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: one argument
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return True
    return sum(p.kind in positional for p in parameters) > 1
