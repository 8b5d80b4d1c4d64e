"""The watch transports: ``GET /api/watch`` as server-sent events, and the
change stream the /ws/agents/ ``watch`` frame shares with it.

New changes are found by polling the audit log every 100 ms, which is right
across processes without any channel layer. Values are read in byte-bounded
batches (``coordination.watch.byte_batches``), each only once the one before
it has been sent, so a watcher that stops reading holds one batch.

A stream lives only as long as its key allows it: it is registered with the
key watcher like a socket, and a revoked or expired key, a lost ``shard:read``
or a scope that no longer covers its prefix ends it within about a second,
with a last ``event: error`` in the API's envelope."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.conf import settings

from access.auth import key_invalid_error, reads_check
from access.handshakes import handshake_key
from access.models import ApiKey
from common.errors import ApiError, ErrorCode, Unauthenticated, internal_error
from common.inputs import revision_param
from coordination.watch import (
    WINDOW,
    byte_batches,
    change_window,
    changes_of,
    parse_watch_params,
    watch_start,
)
from realtime.keywatch import CLOSE_CODE_KEY_INVALID, key_watch

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.1
KEEPALIVE_SECONDS = 15
# How long the last frame of an ended stream may wait for a reader that has
# stopped reading; then the connection is dropped without it.
FAREWELL_SECONDS = 1.0


async def change_stream(*, prefix: str, since: int) -> AsyncIterator[dict[str, Any] | None]:
    """Changes after ``since`` forever; None items are idle ticks (for keep-alives).
    The next batch of values is read only when the consumer asks for it."""
    window_fetch = database_sync_to_async(change_window)
    values_fetch = database_sync_to_async(changes_of)
    cursor = since
    while True:
        window = await window_fetch(prefix=prefix, since=cursor)
        for revisions in byte_batches(window):
            for change in await values_fetch(revisions):
                yield change
            cursor = revisions[-1]  # past a compacted one too, never back
        if len(window) < WINDOW:
            yield None
            await asyncio.sleep(POLL_SECONDS)


class OpenWatches:
    """Watches open per key in this process, capped (ZEROLOCK_MAX_WATCHES_PER_KEY):
    SSE streams and /ws/agents/ watches alike.

    Each one polls the log every POLL_SECONDS through the one thread
    ``database_sync_to_async`` runs on, so a key opening watches without end
    would have made every other socket's database work wait behind them."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def acquire(self, key_prefix: str) -> None:
        limit = settings.ZEROLOCK_MAX_WATCHES_PER_KEY
        held = self._open.get(key_prefix, 0)
        if held >= limit:
            raise ApiError(
                ErrorCode.TOO_MANY_WATCHES,
                f"This key already has {held} watches open here (at most {limit}); "
                "close one, or watch a wider prefix with one stream.",
                limit=limit,
            )
        self._open[key_prefix] = held + 1

    def release(self, key_prefix: str) -> None:
        held = self._open.get(key_prefix, 0) - 1
        if held > 0:
            self._open[key_prefix] = held
        else:
            self._open.pop(key_prefix, None)

    def held(self, key_prefix: str) -> int:
        return self._open.get(key_prefix, 0)


# Touched only from the event loop (acquire and release both run in it): no lock.
open_watches = OpenWatches()


class _Stream:
    """One open SSE stream, as the key watcher sees it (``keywatch.Watched``)."""

    def __init__(self, key: ApiKey, prefix: str) -> None:
        self.key = key
        self.prefix = prefix
        self.ended: ApiError | None = None
        self.task: asyncio.Task[None] | None = None

    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None:
        if code == CLOSE_CODE_KEY_INVALID:
            self.end(key_invalid_error())
        else:
            self.end(
                ApiError(ErrorCode.PERMISSION_DENIED, reason or "This watch is no longer allowed.")
            )

    async def key_changed(self, key: ApiKey) -> None:
        try:
            reads_check(key, shard_ids=[self.prefix])
        except ApiError as refusal:
            self.end(refusal)
            return
        self.key = key

    def end(self, error: ApiError) -> None:
        if self.ended is None:
            self.ended = error
            if self.task is not None:
                self.task.cancel()


@database_sync_to_async
def _open(scope: dict, raw_key: str, prefix: str, since: int | None) -> tuple[ApiKey, int]:
    # Served outside Django's middleware: the same handshake rule as the sockets
    # (failures audited in batches and limited per address).
    key = handshake_key(scope=scope, raw_key=raw_key)
    return key, watch_start(key=key, prefix=prefix, since=since)


class WatchEvents:
    """``GET /api/watch?prefix=&since=``: server-sent events, one per change
    (``id:`` is the revision, so EventSource resumes by itself)."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers", []))
        query = parse_qs(scope.get("query_string", b"").decode("latin1"))
        try:
            if scope["method"] != "GET":
                raise ApiError(ErrorCode.METHOD_NOT_ALLOWED, "Watch with GET.")
            prefix, since = parse_watch_params(query)
            resume = headers.get(b"last-event-id", b"").decode("latin1")
            if resume:
                since = revision_param(resume, "Last-Event-ID")
            raw_key = headers.get(b"x-api-key", b"").decode("latin1")
            if not raw_key:
                raise Unauthenticated()
            key, start = await _open(scope, raw_key, prefix, since)
            open_watches.acquire(key.prefix)
        except ApiError as error:
            await _send_error(send, error)
            return
        except Exception:  # outside Django: nothing else would answer in the envelope
            logger.exception("Unhandled error opening a watch")
            await _send_error(send, internal_error())
            return
        stream = _Stream(key, prefix)
        key_watch.register(key, stream)
        try:
            stream.task = asyncio.ensure_future(_events(receive, send, prefix, start))
            try:
                await stream.task
            except asyncio.CancelledError:
                if stream.ended is None:
                    raise  # the server is stopping, not the key
            if stream.ended is not None:
                await _farewell(send, stream.ended)
        finally:
            key_watch.unregister(key.prefix, stream)
            open_watches.release(key.prefix)


async def _events(receive: Any, send: Any, prefix: str, since: int) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/event-stream"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b": watching\n\n", "more_body": True})
    disconnected = asyncio.ensure_future(_disconnect(receive))
    loop = asyncio.get_running_loop()
    idle_since = loop.time()
    try:
        async for change in change_stream(prefix=prefix, since=since):
            if disconnected.done():
                return
            now = loop.time()
            if change is None:
                if now - idle_since > KEEPALIVE_SECONDS:
                    await _body(send, b": keepalive\n\n")
                    idle_since = now
                continue
            idle_since = now
            await _body(
                send, f"id: {change['revision']}\nevent: change\ndata: {json.dumps(change)}\n\n"
            )
    finally:
        disconnected.cancel()


async def _body(send: Any, data: bytes | str, more: bool = True) -> None:
    body = data.encode() if isinstance(data, str) else data
    await send({"type": "http.response.body", "body": body, "more_body": more})


async def _farewell(send: Any, error: ApiError) -> None:
    """The last frame of a stream its key no longer allows, then the end."""
    frame = f"event: error\ndata: {json.dumps(error.envelope())}\n\n"
    with contextlib.suppress(Exception, asyncio.TimeoutError):
        await asyncio.wait_for(_body(send, frame, more=False), FAREWELL_SECONDS)


async def _send_error(send: Any, error: ApiError) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(error.envelope()).encode()})


async def _disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
