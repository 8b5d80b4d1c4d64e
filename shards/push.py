"""Pushes from synchronous code (services on the HTTP threads) to channel-layer groups.

The in-memory channel layer belongs to the server's event loop and is not safe
to call from another thread's loop, so when that loop is known (Daphne, or a
test's loop) messages are handed to it; otherwise (a WSGI-only process, a
management command) ``async_to_sync`` is used, which is right for Redis.
A push is fire-and-forget: nothing a client was told depends on it arriving.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from concurrent.futures import Future
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)
_loop: asyncio.AbstractEventLoop | None = None
# The live pages (console, dashboards) all listen on this one group.
LIVE_GROUP = "live"


def bind_loop() -> None:
    """Called from async entry points: this loop owns the channel layer."""
    global _loop
    _loop = asyncio.get_running_loop()


def group_name(kind: str, shard_id: str) -> str:
    # Group names allow [A-Za-z0-9._-] under 100 chars; shard ids allow ':' and 128.
    return f"{kind}.{hashlib.sha256(shard_id.encode()).hexdigest()[:40]}"


def group_send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _loop
    if loop is not None and loop.is_running():
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.create_task(layer.group_send(group, message))
        else:
            asyncio.run_coroutine_threadsafe(
                layer.group_send(group, message), loop
            ).add_done_callback(_log_failure)
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.exception("push to %s failed", group)


def _log_failure(future: Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("push failed", exc_info=future.exception())


def crdt_update_push(*, shard_id: str, update: bytes, origin: str = "") -> None:
    """A merged update, to the shard's Yjs clients (except the one it came from)."""
    group_send(
        group_name("crdt", shard_id), {"type": "crdt.update", "update": update, "origin": origin}
    )
