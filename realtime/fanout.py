"""Per-process delivery of pushes to this process's sockets.

Each server process joins one channel-layer group (``push.PROCESS_GROUP``) with
one channel of its own, once, and keeps local maps: shard id -> subscribed
/ws/agents/ sockets, and the open /ws/live/ pages. A subscribe is then a dict
insert per id, with no channel-layer call at all: joining one group per
subscribed id cost a Redis round trip (two, in fact) per id, and 20 x 1,000 ids
on one socket took 41 s while health waited seconds. A commit costs one message
per server process, which serves both its subscribers and its live pages,
instead of one per subscriber socket (the socket sends are counted as before).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from channels.layers import get_channel_layer

from metrics import record
from realtime import push

logger = logging.getLogger(__name__)
# Channel-layer group memberships expire (a day by default): join again well before.
REJOIN_SECONDS = 3600


class Subscriber(Protocol):
    async def shard_invalidate(self, event: dict[str, Any]) -> None: ...


class LivePage(Protocol):
    async def live_event(self, event: dict[str, Any]) -> None: ...


class Fanout:
    def __init__(self) -> None:
        self._by_shard: dict[str, set[Subscriber]] = {}
        self._live: set[LivePage] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._ready: asyncio.Future | None = None

    async def ensure_listening(self) -> None:
        """Joins this process to the invalidation group (once per event loop)."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._loop = loop
            self._ready = loop.create_future()
            self._task = loop.create_task(self._listen(self._ready))
        assert self._ready is not None
        await asyncio.shield(self._ready)

    def reset(self) -> None:
        """Forgets the listener and every subscriber (tests: each has its own loop)."""
        loop_open = self._loop is not None and not self._loop.is_closed()
        if self._task is not None and loop_open:
            self._task.cancel()  # the closing loop would cancel it too; sooner is kinder
        self._task = self._loop = self._ready = None
        self._by_shard.clear()
        self._live.clear()

    def add(self, subscriber: Subscriber, shard_ids: set[str]) -> None:
        for shard_id in shard_ids:
            self._by_shard.setdefault(shard_id, set()).add(subscriber)

    def discard(self, subscriber: Subscriber, shard_ids: set[str]) -> None:
        for shard_id in shard_ids:
            held = self._by_shard.get(shard_id)
            if held is not None:
                held.discard(subscriber)
                if not held:
                    del self._by_shard[shard_id]

    def add_live(self, page: LivePage) -> None:
        self._live.add(page)

    def discard_live(self, page: LivePage) -> None:
        self._live.discard(page)

    def subscribers(self, shard_id: str) -> int:
        return len(self._by_shard.get(shard_id, ()))

    async def _listen(self, ready: asyncio.Future) -> None:
        layer = get_channel_layer(push.PROCESS_LAYER)
        try:
            channel = await layer.new_channel()
            await layer.group_add(push.PROCESS_GROUP, channel)
        except Exception as exc:
            ready.set_exception(exc)
            raise
        ready.set_result(None)
        rejoin = asyncio.get_running_loop().create_task(self._rejoin(layer, channel))
        try:
            while True:
                try:
                    event = await layer.receive(channel)
                except asyncio.CancelledError:
                    raise
                except Exception:  # e.g. a Redis read timeout: the listener must live on
                    logger.exception("invalidation receive failed; retrying")
                    await asyncio.sleep(0.1)
                    continue
                await self._dispatch(event)
        finally:
            rejoin.cancel()

    async def _dispatch(self, event: dict[str, Any]) -> None:
        if event.get("type") == push.BATCH_TYPE:
            for message in event["messages"]:
                await self._dispatch(message)
            return
        if event.get("type") == "live.event":
            await self._to_live_pages(event)
            return
        subscribers = list(self._by_shard.get(event.get("shard_id", ""), ()))
        for subscriber in subscribers:
            try:
                await subscriber.shard_invalidate(event)
            except Exception:  # one closed socket must not stop the others' pushes
                logger.exception("invalidate push failed")
        if subscribers and "committed_at" in event:
            # Wall clocks: the commit may have happened in another process.
            record.recorder.push_delay(time.time() - event["committed_at"])
        if self._live and not event.get("deleted"):
            await self._to_live_pages({"type": "live.event", "message": push.live_shard(event)})

    async def _to_live_pages(self, event: dict[str, Any]) -> None:
        for page in list(self._live):
            try:
                await page.live_event(event)
            except Exception:
                logger.exception("live push failed")

    @staticmethod
    async def _rejoin(layer: Any, channel: str) -> None:
        while True:
            await asyncio.sleep(REJOIN_SECONDS)
            try:
                await layer.group_add(push.PROCESS_GROUP, channel)
            except Exception:
                logger.exception("could not rejoin the invalidation group")


fanout = Fanout()
