"""Watch: every change after a revision, in revision order, then live ones.

The revision is the audit entry id (global, gap-free), so the audit log is the
change stream and a reconnecting watcher resumes exactly where it stopped.
Served as server-sent events on ``GET /api/watch`` (an ASGI handler: the WSGI
bridge buffers whole responses) and as ``{"type": "watch"}`` on /ws/agents/.
New changes are found by polling the log every 100 ms, which is right across
processes without any channel layer."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.conf import settings

from access.auth import permission_check
from access.handshakes import handshake_key
from audit.models import AuditAction, AuditEntry
from common.errors import ApiError, internal_error
from common.inputs import revision_param
from common.prefixes import prefix_matches, prefix_q

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.1
BATCH = 500
KEEPALIVE_SECONDS = 15
CHANGE_ACTIONS = [
    AuditAction.SHARD_CREATE,
    AuditAction.SHARD_COMMIT,
    AuditAction.SHARD_DELETE,
    AuditAction.LEASE_RELEASED_PATH,
]


def change_data(entry: AuditEntry) -> dict[str, Any]:
    return {
        "revision": entry.pk,
        "shard_id": entry.shard_id,
        "action": entry.action,
        "version": entry.version_after,
        "value": entry.value,
        "agent_id": entry.agent_id,
        "at": entry.created_at.isoformat().replace("+00:00", "Z"),
    }


def watch_check(*, prefix: str, since: int, key: Any) -> None:
    """Refuses a watch that would miss changes or see shards outside the key's scope."""
    permission_check(key, "shard:read")
    if key.shard_prefixes and not any(prefix_matches(prefix, p) for p in key.shard_prefixes):
        raise ApiError(
            403,
            "PERMISSION_DENIED",
            f"Watch a prefix inside this key's scope: {key.shard_prefixes}.",
        )
    oldest = AuditEntry.objects.order_by("id").values_list("id", flat=True).first()
    if oldest is not None and since < oldest - 1:
        raise ApiError(
            410,
            "COMPACTED",
            f"History before revision {oldest} is no longer held; watch from {oldest - 1} or later.",
            oldest_revision=oldest,
        )


def changes_after(*, prefix: str, since: int, limit: int = BATCH) -> list[dict[str, Any]]:
    entries = AuditEntry.objects.filter(id__gt=since, action__in=CHANGE_ACTIONS)
    if prefix:
        entries = entries.filter(prefix_q("shard_id", prefix))
    return [change_data(e) for e in entries.order_by("id")[:limit]]


def latest_revision() -> int:
    return AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0


async def change_stream(*, prefix: str, since: int) -> AsyncIterator[dict[str, Any] | None]:
    """Changes after ``since`` forever; None items are idle ticks (for keep-alives)."""
    fetch = database_sync_to_async(changes_after)
    cursor = since
    while True:
        batch = await fetch(prefix=prefix, since=cursor)
        for change in batch:
            cursor = change["revision"]
            yield change
        if len(batch) < BATCH:
            yield None
            await asyncio.sleep(POLL_SECONDS)


def parse_watch_params(query: dict[str, list[str]]) -> tuple[str, int]:
    prefix = query.get("prefix", [""])[0]
    raw_since = query.get("since", [""])[0]
    if raw_since == "":
        return prefix, -1  # from now on
    return prefix, revision_param(raw_since, "since")


@database_sync_to_async
def _open(scope: dict, raw_key: str, prefix: str, since: int) -> tuple[str, int]:
    # Served outside Django's middleware: the same handshake rule as the sockets
    # (failures audited in batches and limited per address).
    key = handshake_key(scope=scope, raw_key=raw_key)
    if since < 0:
        since = latest_revision()
    watch_check(prefix=prefix, since=since, key=key)
    return key.prefix, since


class OpenWatches:
    """Streams open per key in this process, capped (ZEROLOCK_MAX_WATCHES_PER_KEY).

    Each stream polls the log every POLL_SECONDS through the one thread
    ``database_sync_to_async`` runs on, so a key opening streams without end
    would have made every other socket's database work wait behind them."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def acquire(self, key_prefix: str) -> None:
        limit = settings.ZEROLOCK_MAX_WATCHES_PER_KEY
        held = self._open.get(key_prefix, 0)
        if held >= limit:
            raise ApiError(
                429,
                "TOO_MANY_WATCHES",
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


# Touched only from the event loop (acquire and release both run in it): no lock.
open_watches = OpenWatches()


class WatchEvents:
    """``GET /api/watch?prefix=&since=``: server-sent events, one per change
    (``id:`` is the revision, so EventSource resumes by itself)."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers", []))
        query = parse_qs(scope.get("query_string", b"").decode("latin1"))
        try:
            if scope["method"] != "GET":
                raise ApiError(405, "METHOD_NOT_ALLOWED", "Watch with GET.")
            prefix, since = parse_watch_params(query)
            resume = headers.get(b"last-event-id", b"").decode("latin1")
            if resume:
                since = revision_param(resume, "Last-Event-ID")
            raw_key = headers.get(b"x-api-key", b"").decode("latin1")
            if not raw_key:
                raise ApiError(401, "UNAUTHENTICATED", "Send your API key in the X-API-Key header.")
            key_prefix, since = await _open(scope, raw_key, prefix, since)
            open_watches.acquire(key_prefix)
        except ApiError as error:
            await _send_error(send, error)
            return
        except Exception:  # outside Django: nothing else would answer in the envelope
            logger.exception("Unhandled error opening a watch")
            await _send_error(send, internal_error())
            return
        try:
            await self._stream(receive, send, prefix, since)
        finally:
            open_watches.release(key_prefix)

    @staticmethod
    async def _stream(receive: Any, send: Any, prefix: str, since: int) -> None:
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
        idle_since = asyncio.get_running_loop().time()
        try:
            async for change in change_stream(prefix=prefix, since=since):
                if disconnected.done():
                    return
                now = asyncio.get_running_loop().time()
                if change is None:
                    if now - idle_since > KEEPALIVE_SECONDS:
                        await send(
                            {
                                "type": "http.response.body",
                                "body": b": keepalive\n\n",
                                "more_body": True,
                            }
                        )
                        idle_since = now
                    continue
                idle_since = now
                frame = f"id: {change['revision']}\nevent: change\ndata: {json.dumps(change)}\n\n"
                await send(
                    {"type": "http.response.body", "body": frame.encode(), "more_body": True}
                )
        finally:
            disconnected.cancel()


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
