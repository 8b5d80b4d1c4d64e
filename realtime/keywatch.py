"""Closes WebSocket connections whose API key was revoked or has expired, and
tells them when the key's grants change.

One watcher task per server process polls the database for the keys of its open
connections (one small query every half second, however many connections), so
revocation and changes reach connections in every process, with or without Redis.
A changed key (permissions, bound agents, shard scopes) is handed to each of its
connections' ``key_changed``, which re-checks what the socket was opened for.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from channels.db import database_sync_to_async

from access.models import ApiKey

logger = logging.getLogger(__name__)
POLL_SECONDS = 0.5
CLOSE_CODE_KEY_INVALID = 4401


class Watched(Protocol):
    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None: ...

    async def key_changed(self, key: ApiKey) -> None: ...


def grants(key: ApiKey) -> tuple[Any, ...]:
    """What a key allows: a change here is what sockets must re-check."""
    return (sorted(key.permissions), sorted(key.agent_ids), sorted(key.shard_prefixes))


@database_sync_to_async
def _usable_keys(prefixes: list[str]) -> dict[str, ApiKey]:
    return {k.prefix: k for k in ApiKey.objects.usable().filter(prefix__in=prefixes)}


class KeyWatch:
    def __init__(self) -> None:
        self._connections: dict[str, set[Watched]] = {}
        self._grants: dict[str, tuple[Any, ...]] = {}
        self._task: asyncio.Task | None = None

    def register(self, key: ApiKey, connection: Watched) -> None:
        self._connections.setdefault(key.prefix, set()).add(connection)
        # The grants the socket was checked against; the next poll compares.
        self._grants.setdefault(key.prefix, grants(key))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def unregister(self, prefix: str, connection: Watched) -> None:
        held = self._connections.get(prefix)
        if held is not None:
            held.discard(connection)
            if not held:
                del self._connections[prefix]
                self._grants.pop(prefix, None)

    async def _run(self) -> None:
        while self._connections:
            await asyncio.sleep(POLL_SECONDS)
            asked = list(self._connections)
            try:
                keys = await _usable_keys(asked)
            except Exception:  # a failed poll must not end the watcher
                logger.exception("API key watch poll failed")
                continue
            # Only the keys this query asked about are decided: one registered
            # while it ran is missing from the answer, not revoked (a valid key's
            # sockets were closed 4401, 15 of 40 under load). The next poll asks.
            for prefix in asked:
                if prefix not in self._connections:
                    continue  # all its connections left while the query ran
                key = keys.get(prefix)
                if key is None:
                    self._grants.pop(prefix, None)
                    for connection in list(self._connections.pop(prefix, ())):
                        await connection.close(
                            code=CLOSE_CODE_KEY_INVALID, reason="API key revoked or expired"
                        )
                elif grants(key) != self._grants.get(prefix):
                    self._grants[prefix] = grants(key)
                    for connection in list(self._connections.get(prefix, ())):
                        try:
                            await connection.key_changed(key)
                        except Exception:
                            logger.exception("re-checking a socket after a key change failed")


key_watch = KeyWatch()
