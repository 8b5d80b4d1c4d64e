"""Closes WebSocket connections whose API key was revoked or has expired.

One watcher task per server process polls the database for the keys of its open
connections (one small query every half second, however many connections), so
revocation reaches connections in every process, with or without Redis.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from channels.db import database_sync_to_async

from .models import ApiKey

logger = logging.getLogger(__name__)
POLL_SECONDS = 0.5
CLOSE_CODE_KEY_INVALID = 4401


class Closable(Protocol):
    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None: ...


@database_sync_to_async
def _invalid_prefixes(prefixes: list[str]) -> set[str]:
    usable = set(
        ApiKey.objects.usable().filter(prefix__in=prefixes).values_list("prefix", flat=True)
    )
    return set(prefixes) - usable


class KeyWatch:
    def __init__(self) -> None:
        self._connections: dict[str, set[Closable]] = {}
        self._task: asyncio.Task | None = None

    def register(self, prefix: str, connection: Closable) -> None:
        self._connections.setdefault(prefix, set()).add(connection)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def unregister(self, prefix: str, connection: Closable) -> None:
        held = self._connections.get(prefix)
        if held is not None:
            held.discard(connection)
            if not held:
                del self._connections[prefix]

    async def _run(self) -> None:
        while self._connections:
            await asyncio.sleep(POLL_SECONDS)
            try:
                invalid = await _invalid_prefixes(list(self._connections))
            except Exception:  # a failed poll must not end the watcher
                logger.exception("API key watch poll failed")
                continue
            for prefix in invalid:
                for connection in list(self._connections.pop(prefix, ())):
                    await connection.close(
                        code=CLOSE_CODE_KEY_INVALID, reason="API key revoked or expired"
                    )


key_watch = KeyWatch()
