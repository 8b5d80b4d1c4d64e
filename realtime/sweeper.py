"""Expiry inside the server process, while anyone is connected.

The Celery beat task marks overdue approvals expired, but on the embedded
defaults (in-memory channel layer) the worker is another process and its pushes
reach no socket. So each server process with open sockets also sweeps once a
second: the ``approval_decided`` push then leaves from the process that holds
the sockets. What it runs is whatever the apps registered as timed sweeps
(``shards.hooks.tick_sweeps``: approval and lease expiry); marking is idempotent. The sweep stops
when the process's last socket closes (it used to run for the life of any
process that ever had one), or, when a closing agent socket started its session
leases' grace, once that grace has run out (``sweep_for``)."""

from __future__ import annotations

import asyncio
import logging
import time

from channels.db import database_sync_to_async

from shards.hooks import tick_sweeps_run

logger = logging.getLogger(__name__)
SWEEP_SECONDS = 1.0

_task: asyncio.Task | None = None
_sockets = 0  # open sockets in this process that asked for the sweep
_until = 0.0  # time.monotonic() up to which it sweeps with no socket open


def ensure_sweeping() -> None:
    """Called from consumers' connect (on the server's loop); pair it with
    ``sweeping_release`` in disconnect."""
    global _sockets
    _sockets += 1
    _start()


def sweep_for(seconds: float) -> None:
    """Go on sweeping for at least ``seconds``, sockets or not (on the server's loop)."""
    global _until
    _until = max(_until, time.monotonic() + seconds)
    _start()


def _start() -> None:
    global _task
    if _task is None or _task.done() or _task.get_loop() is not asyncio.get_running_loop():
        _task = asyncio.get_running_loop().create_task(_sweep())


def _wanted() -> bool:
    return _sockets > 0 or time.monotonic() < _until


def sweeping_release() -> None:
    global _sockets
    _sockets = max(0, _sockets - 1)


async def _sweep() -> None:
    sweep = database_sync_to_async(tick_sweeps_run)
    while _wanted():
        await asyncio.sleep(SWEEP_SECONDS)
        try:
            await sweep()
        except Exception:  # a failed sweep must not end the loop
            logger.exception("expiry sweep failed")
