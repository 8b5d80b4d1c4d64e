"""This process's agent sessions (coordination.sessions), kept alive while their
sockets are open: one heartbeat task renews them all, and stops when the last
one closes."""

from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async
from django.conf import settings

from coordination.sessions import session_close, session_open, sessions_seen
from realtime.sweeper import SWEEP_SECONDS, sweep_for

logger = logging.getLogger(__name__)
_open: set[int] = set()
_task: asyncio.Task | None = None


async def presence_open(*, key_prefix: str, agent_id: str) -> int:
    global _task
    session_id = await database_sync_to_async(session_open)(
        key_prefix=key_prefix, agent_id=agent_id
    )
    _open.add(session_id)
    if _task is None or _task.done() or _task.get_loop() is not asyncio.get_running_loop():
        _task = asyncio.get_running_loop().create_task(_heartbeat())
    return session_id


async def presence_close(session_id: int) -> None:
    _open.discard(session_id)
    grace = await database_sync_to_async(session_close)(session_id)
    if grace:
        # The agent's session leases end `grace` seconds from now: this process
        # sweeps until then even if this was its last socket, so their end (and
        # the release of what they held) is written on time with nobody asking.
        sweep_for(grace + SWEEP_SECONDS)


async def _heartbeat() -> None:
    seen = database_sync_to_async(sessions_seen)
    while _open:
        await asyncio.sleep(settings.ZEROLOCK_SESSION_HEARTBEAT_SECONDS)
        try:
            await seen(set(_open))
        except Exception:  # a failed renewal must not end the loop
            logger.exception("session heartbeat failed")
