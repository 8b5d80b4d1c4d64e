"""Pushes from synchronous code (services on the HTTP threads) to channel-layer groups.

The in-memory channel layer belongs to the server's event loop and is not safe
to call from another thread's loop, so when that loop is known (Daphne, or a
test's loop) messages are handed to it; otherwise (a WSGI-only process, a
Celery worker, a management command) one private loop thread per process
sends them, which is right for Redis.
A push is fire-and-forget: nothing a client was told depends on it arriving.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from concurrent.futures import Future
from typing import Any

from channels.layers import get_channel_layer
from django.utils import timezone

from common.events import event_sink
from common.jsondiff import json_diff
from metrics import record

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
    # No server loop here (a management command, a Celery worker, a test): a
    # private loop thread. ``async_to_sync`` per push made a new event loop, and
    # with Redis a new connection, every time: 10 ms a push, measured.
    asyncio.run_coroutine_threadsafe(
        layer.group_send(group, message), _private_loop()
    ).add_done_callback(_log_failure)


_private: asyncio.AbstractEventLoop | None = None
_private_lock = threading.Lock()


def _private_loop() -> asyncio.AbstractEventLoop:
    global _private
    with _private_lock:
        if _private is None or _private_pid != os.getpid():
            _start_private()
        return _private


_private_pid = 0


def _start_private() -> None:
    global _private, _private_pid
    _private = asyncio.new_event_loop()
    _private_pid = os.getpid()
    threading.Thread(target=_private.run_forever, name="push-loop", daemon=True).start()


def _log_failure(future: Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("push failed", exc_info=future.exception())


def crdt_update_push(*, shard_id: str, update: bytes, origin: str = "") -> None:
    """A merged update, to the shard's Yjs clients (except the one it came from)."""
    group_send(
        group_name("crdt", shard_id), {"type": "crdt.update", "update": update, "origin": origin}
    )


def shard_changed(*, shard_id: str, version: int, committed_by: str) -> None:
    """After an applied change (on commit): invalidate the shard's subscribers
    (Layer 2), and tell the live pages."""
    # What a naive broadcast would have cost: one message to every agent socket.
    record.recorder.count(record.WS_NAIVE, record.connections_total())
    group_send(
        INVALIDATE_GROUP,
        {
            "type": "shard.invalidate",
            "shard_id": shard_id,
            "version": version,
            "committed_by": committed_by,
        },
    )
    live_send(
        {
            "type": "shard",
            "shard_id": shard_id,
            "version": version,
            "updated_by": committed_by,
            "updated_at": timezone.now().isoformat(),
        }
    )


def shard_deleted(*, shard_id: str, deleted_by: str) -> None:
    """After a delete (on commit): the shard's Yjs sockets are closed, and its
    subscribers get a last ``invalidate`` marked ``deleted`` and are unsubscribed,
    so a shard re-created under this id starts with none of them."""
    group_send(group_name("crdt", shard_id), {"type": "crdt.deleted", "shard_id": shard_id})
    group_send(
        INVALIDATE_GROUP,
        {
            "type": "shard.invalidate",
            "shard_id": shard_id,
            "version": None,
            "committed_by": deleted_by,
            "deleted": True,
        },
    )


# Invalidations go to one group that each server process joins once (realtime.fanout);
# the process hands them to its own subscribed sockets. Joining a channel-layer
# group per subscribed id was a Redis round trip per id.
INVALIDATE_GROUP = "invalidate"


def live_send(message: dict[str, Any]) -> None:
    group_send(LIVE_GROUP, {"type": "live.event", "message": message})


def agent_group(key_prefix: str, agent_id: str) -> str:
    """Agent-addressed pushes go to sockets of one KEY acting as one agent: an agent
    id is only a claim, and another key may claim the same name."""
    return group_name("agent", f"{key_prefix}/{agent_id}")


def agent_send(key_prefix: str, agent_id: str, message: dict[str, Any]) -> None:
    """To every /ws/agents/ socket opened with this key as this agent."""
    group_send(agent_group(key_prefix, agent_id), {"type": "agent.message", "message": message})


def conflict_notify(
    *, key_prefix: str, agent_id: str, shard_id: str, version: int, winning: Any, rejected: Any
) -> None:
    """Layer 3: the loser of a race learns what won and how its value differs."""
    agent_send(
        key_prefix,
        agent_id,
        {
            "type": "conflict_notify",
            "shard_id": shard_id,
            "version": version,
            "winning_value": winning,
            "rejected_value": rejected,
            "diff": json_diff(winning, rejected),
        },
    )


def approval_changed(*, approval: Any, event: str) -> None:
    """``event``: "requested", "approved_partly" (quorum not reached yet) or
    "decided": ``approval_decided`` to the requesting agent's sockets (the key
    and agent that asked), and every change to the console's /ws/live/ pages."""
    if event == "decided":
        agent_send(
            approval.requested_key_prefix,
            approval.requested_by,
            {
                "type": "approval_decided",
                "approval_id": approval.id,
                "shard_id": approval.shard_id,
                "status": approval.status,
                "commit": approval.commit,
                "reason": approval.reason,
                "decided_by": approval.decided_by,
            },
        )
    live_send(
        {
            "type": "approval",
            "event": event,
            "approval_id": approval.id,
            "shard_id": approval.shard_id,
            "status": approval.status,
        }
    )


def sinks_register() -> None:
    """What the domain's events become here (``common.events``)."""
    event_sink("shard_changed", shard_changed)
    event_sink("shard_deleted", shard_deleted)
    event_sink("crdt_update", crdt_update_push)
    event_sink("conflict", conflict_notify)
    event_sink("approval_changed", approval_changed)
