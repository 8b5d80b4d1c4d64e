"""Expiry inside the server process, while anyone is connected.

The Celery beat task marks overdue approvals expired, but on the embedded
defaults (in-memory channel layer) the worker is another process and its pushes
reach no socket. So each server process with open sockets also sweeps once a
second: the ``approval_decided`` push then leaves from the process that holds
the sockets. Both call the same service; marking is idempotent."""

from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async

from .services import approval_expire_due

logger = logging.getLogger(__name__)
SWEEP_SECONDS = 1.0

_task: asyncio.Task | None = None


def ensure_sweeping() -> None:
    """Called from consumers' connect (on the server's loop)."""
    global _task
    if _task is None or _task.done() or _task.get_loop() is not asyncio.get_running_loop():
        _task = asyncio.get_running_loop().create_task(_sweep())


async def _sweep() -> None:
    sweep = database_sync_to_async(approval_expire_due)
    while True:
        await asyncio.sleep(SWEEP_SECONDS)
        try:
            await sweep()
        except Exception:  # a failed sweep must not end the loop
            logger.exception("approval expiry sweep failed")
