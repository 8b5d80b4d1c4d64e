"""Pushes from synchronous code (services on the HTTP threads) to channel-layer groups.

The in-memory channel layer belongs to the server's event loop and is not safe
to call from another thread's loop, so when that loop is known (the web
server's, bound by the WSGI bridge and the consumers, or a test's) messages are
handed to it; otherwise (a Celery worker, a management command) one private
loop thread per process sends them, which is right for Redis.
A push is fire-and-forget: nothing a client was told depends on it arriving.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from typing import Any

from channels.layers import get_channel_layer
from django.utils import timezone

from approvals.routing import current_group_ids
from common.events import event_sink
from common.inputs import iso_time
from common.jsondiff import json_diff
from metrics import record

logger = logging.getLogger(__name__)
_loop: asyncio.AbstractEventLoop | None = None


def bind_loop() -> None:
    """Called from async entry points: this loop owns the channel layer."""
    global _loop
    _loop = asyncio.get_running_loop()


def group_name(kind: str, shard_id: str) -> str:
    # Group names allow [A-Za-z0-9._-] under 100 chars; shard ids allow ':' and 128.
    return f"{kind}.{hashlib.sha256(shard_id.encode()).hexdigest()[:40]}"


def group_send(group: str, message: dict[str, Any]) -> None:
    """Queues ``message`` for ``group`` on this process's outbox (see Outbox)."""
    if get_channel_layer() is None:
        return
    loop = _loop
    if loop is None or not loop.is_running():
        # No server loop here (a management command, a Celery worker, a test): a
        # private loop thread. ``async_to_sync`` per push made a new event loop, and
        # with Redis a new connection, every time: 10 ms a push, measured.
        loop = _private_loop()
    _outbox(loop).put(group, message)


# A batch of messages for one group travels as one channel-layer message of this
# type; every receiver of pushes handles it (BatchedPushes, realtime.fanout).
BATCH_TYPE = "push.batch"
# Bounds one channel-layer message (channels_redis and the in-memory layer keep
# whole messages in memory; Redis caps a value at 512 MB).
BATCH_MAX = 200


class Outbox:
    """Per event loop, one sender task that drains every queued push.

    With Redis, ``group_send`` costs several round trips and a msgpack encoding,
    and one task per push paid them for every change: 17.8 % of the web process's
    CPU on commits (bench/profile.py commit --db postgres --gil). One sender
    sends what queued up while its previous send was in flight as one message
    per group, so under load the cost is shared by a batch, and at rest a push
    leaves at once, as before. Order per group is kept: batches leave one after
    another, and a batch keeps its messages in the order they were queued."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._sending = False

    def put(self, group: str, message: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append((group, message))
            if self._sending:
                return
            self._sending = True
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._start()
            return
        try:
            self.loop.call_soon_threadsafe(self._start)
        except RuntimeError:  # the loop closed meanwhile (shutdown): pushes are best effort
            with self._lock:
                self._pending.clear()
                self._sending = False
            logger.warning("push dropped: its event loop is closed")

    def _start(self) -> None:
        self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while True:
                with self._lock:
                    queued, self._pending = self._pending, []
                    if not queued:
                        self._sending = False
                        return
                # Groups in parallel; one group's batches one after another.
                sends = [_send_in_order(g, messages) for g, messages in batched(queued)]
                for outcome in await asyncio.gather(*sends, return_exceptions=True):
                    if isinstance(outcome, Exception):
                        logger.error("push failed", exc_info=outcome)
        except BaseException:
            with self._lock:  # cancelled with its loop: a later loop starts afresh
                self._sending = False
            raise


def batched(queued: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Per group, in the order the groups were first named, the channel-layer
    messages to send one after another: a single message goes as itself, more go
    as BATCH_TYPE messages of at most BATCH_MAX."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for group, message in queued:
        by_group.setdefault(group, []).append(message)
    out = []
    for group, messages in by_group.items():
        chunks = [messages[i : i + BATCH_MAX] for i in range(0, len(messages), BATCH_MAX)]
        out.append(
            (group, [c[0] if len(c) == 1 else {"type": BATCH_TYPE, "messages": c} for c in chunks])
        )
    return out


async def _send_in_order(group: str, messages: list[dict[str, Any]]) -> None:
    layer = layer_for(group)
    for message in messages:
        await layer.group_send(group, message)


class BatchedPushes:
    """Mixed into every consumer that joins a push group: a batch is handled as
    its messages, one after another."""

    async def push_batch(self, event: dict[str, Any]) -> None:
        for message in event["messages"]:
            await self.dispatch(message)  # type: ignore[attr-defined]


_outboxes: dict[int, Outbox] = {}
_outboxes_lock = threading.Lock()


def _outbox(loop: asyncio.AbstractEventLoop) -> Outbox:
    box = _outboxes.get(id(loop))
    if box is not None and box.loop is loop:
        return box
    with _outboxes_lock:
        for key in [k for k, b in _outboxes.items() if b.loop.is_closed()]:
            del _outboxes[key]  # each test runs its own loop
        box = _outboxes.get(id(loop))
        if box is None or box.loop is not loop:
            box = _outboxes[id(loop)] = Outbox(loop)
        return box


_private: asyncio.AbstractEventLoop | None = None
_private_lock = threading.Lock()


def _private_loop() -> asyncio.AbstractEventLoop:
    global _private
    with _private_lock:
        if _private is None or _private_pid != os.getpid():
            _private = _start_private()
        return _private


_private_pid = 0


def _start_private() -> asyncio.AbstractEventLoop:
    global _private_pid
    loop = asyncio.new_event_loop()
    _private_pid = os.getpid()
    threading.Thread(target=loop.run_forever, name="push-loop", daemon=True).start()
    return loop


def crdt_update_push(*, shard_id: str, update: bytes, origin: str = "") -> None:
    """A merged update, to the shard's Yjs clients (except the one it came from)."""
    group_send(
        group_name("crdt", shard_id), {"type": "crdt.update", "update": update, "origin": origin}
    )


def shard_changed(*, shard_id: str, version: int, committed_by: str) -> None:
    """After an applied change (on commit): one message to every server process,
    which invalidates the shard's subscribers (Layer 2) and tells its live pages
    (realtime.fanout)."""
    # What a naive broadcast would have cost: one message to every agent socket.
    record.recorder.count(record.WS_NAIVE, record.connections_total())
    group_send(
        PROCESS_GROUP,
        {
            "type": "shard.invalidate",
            "shard_id": shard_id,
            "version": version,
            "committed_by": committed_by,
            "updated_at": iso_time(timezone.now()),
            # For the commit-to-last-frame figure (metrics.record.push_delay).
            "committed_at": time.time(),
        },
    )


def live_shard(invalidate: dict[str, Any]) -> dict[str, Any]:
    """What the live pages are told of a change, from its invalidation."""
    return {
        "type": "shard",
        "shard_id": invalidate["shard_id"],
        "version": invalidate["version"],
        "updated_by": invalidate["committed_by"],
        "updated_at": invalidate.get("updated_at"),
    }


def shard_deleted(*, shard_id: str, deleted_by: str) -> None:
    """After a delete (on commit): the shard's Yjs sockets are closed, and its
    subscribers get a last ``invalidate`` marked ``deleted`` and are unsubscribed,
    so a shard re-created under this id starts with none of them."""
    group_send(group_name("crdt", shard_id), {"type": "crdt.deleted", "shard_id": shard_id})
    group_send(
        PROCESS_GROUP,
        {
            "type": "shard.invalidate",
            "shard_id": shard_id,
            "version": None,
            "committed_by": deleted_by,
            "deleted": True,
        },
    )


# Invalidations and live-page events go to one group that each server process
# joins once (realtime.fanout); the process hands them to its own subscribed
# sockets and open pages. Joining a channel-layer group per subscribed id was a
# Redis round trip per id, and a second group for the pages a second message per
# change.
PROCESS_GROUP = "processes"
# Its own channel layer (settings.CHANNEL_LAYERS): Redis pub/sub where Redis is.
PROCESS_LAYER = "processes"


def layer_for(group: str) -> Any:
    return get_channel_layer(PROCESS_LAYER if group == PROCESS_GROUP else "default")


def live_send(message: dict[str, Any]) -> None:
    """To every open /ws/live/ page, on every server process."""
    group_send(PROCESS_GROUP, {"type": "live.event", "message": message})


def agent_group(key_prefix: str, agent_id: str) -> str:
    """Agent-addressed pushes go to sockets of one KEY acting as one agent: an agent
    id is only a claim, and another key may claim the same name."""
    return group_name("agent", f"{key_prefix}/{agent_id}")


def agent_send(key_prefix: str, agent_id: str, message: dict[str, Any]) -> None:
    """To every /ws/agents/ socket opened with this key as this agent."""
    group_send(agent_group(key_prefix, agent_id), {"type": "agent.message", "message": message})


def conflict_notify(
    *,
    key_prefix: str,
    agent_id: str,
    shard_id: str,
    version: int,
    winning: Any,
    rejected: Any,
    winner_shown: bool = True,
) -> None:
    """Layer 3: the loser of a race learns what won and how its value differs
    (``winner_shown`` False: a key without ``shard:read``, told only that it lost)."""
    message = {
        "type": "conflict_notify",
        "shard_id": shard_id,
        "version": version,
        "rejected_value": rejected,
    }
    if winner_shown:
        message |= {"winning_value": winning, "diff": json_diff(winning, rejected)}
    agent_send(key_prefix, agent_id, message)


def approval_changed(*, approval: Any, event: str) -> None:
    """``event``: "requested", "approved_partly" (quorum not reached yet),
    "escalated" (routing) or "decided": ``approval_decided`` to the requesting
    agent's sockets (the key and agent that asked), and every change to the
    console's /ws/live/ pages of the people who may see it (``groups``: the
    socket applies approvals.routing's rule and strips them)."""
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
                # An approval with edits wrote edited_value, not the proposal: the
                # agent reads it with the approval (``applied_value``).
                "edited": approval.edited,
                # "changes_requested": what the decider asks the agent to change.
                **({"message": approval.reason} if approval.status == "changes_requested" else {}),
            },
        )
    live_send(
        {
            "type": "approval",
            "event": event,
            "approval_id": approval.id,
            "shard_id": approval.shard_id,
            "status": approval.status,
            "groups": sorted(current_group_ids(approval)),
        }
    )


def reservation_changed(*, reservation: dict[str, Any], event: str) -> None:
    """A path reservation made or ended ("created", "released", "expired", "lease
    expired", "lease revoked"): to the console's /ws/live/ pages."""
    live_send({"type": "reservation", "event": event} | reservation)


def sinks_register() -> None:
    """What the domain's events become here (``common.events``)."""
    event_sink("shard_changed", shard_changed)
    event_sink("shard_deleted", shard_deleted)
    event_sink("crdt_update", crdt_update_push)
    event_sink("conflict", conflict_notify)
    event_sink("approval_changed", approval_changed)
    event_sink("reservation_changed", reservation_changed)
