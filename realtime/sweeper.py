"""Expiry inside the server process, while anyone is connected.

The Celery beat task marks overdue approvals expired, but on the embedded
defaults (in-memory channel layer) the worker is another process and its pushes
reach no socket. So each server process with open sockets also sweeps once a
second: the ``approval_decided`` push then leaves from the process that holds
the sockets. What it runs is whatever the apps registered as timed sweeps
(``shards.hooks.tick_sweeps``: approval and lease expiry); marking is idempotent. The sweep stops
when the process's last socket closes (it used to run for the life of any
process that ever had one)."""

from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async

from shards.hooks import tick_sweeps_run

logger = logging.getLogger(__name__)
SWEEP_SECONDS = 1.0

_task: asyncio.Task | None = None
_sockets = 0  # open sockets in this process that asked for the sweep


def ensure_sweeping() -> None:
    """Called from consumers' connect (on the server's loop); pair it with
    ``sweeping_release`` in disconnect."""
    global _task, _sockets
    _sockets += 1
    if _task is None or _task.done() or _task.get_loop() is not asyncio.get_running_loop():
        _task = asyncio.get_running_loop().create_task(_sweep())


def sweeping_release() -> None:
    global _sockets
    _sockets = max(0, _sockets - 1)


async def _sweep() -> None:
    sweep = database_sync_to_async(tick_sweeps_run)
    while _sockets > 0:
        await asyncio.sleep(SWEEP_SECONDS)
        try:
            await sweep()
        except Exception:  # a failed sweep must not end the loop
            logger.exception("expiry sweep failed")
