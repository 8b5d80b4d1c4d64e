"""The agent WebSocket channel, /ws/agents/ (DESIGN.md section 4.1), and the
pages' read-only channel, /ws/live/ (section 4.3)."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from approvals.sweeper import ensure_sweeping

from . import metrics, push
from .auth import AGENT_ID_RE, key_from_raw, permission_check, split_raw_key
from .errors import ApiError
from .keywatch import key_watch
from .models import SHARD_ID_REGEX
from .services import audit_auth_failure
from .watch import change_stream, latest_revision, watch_check

SHARD_ID = re.compile(SHARD_ID_REGEX)


def raw_key_of(scope: dict[str, Any]) -> str:
    """X-API-Key header, or ?api_key= for clients that cannot set headers."""
    for name, value in scope.get("headers", []):
        if name == b"x-api-key":
            return value.decode("latin1")
    query = parse_qs(scope.get("query_string", b"").decode("latin1"))
    return query.get("api_key", [""])[0]


def agent_id_of(scope: dict[str, Any]) -> str:
    """X-Agent-Id header, or ?agent_id=."""
    for name, value in scope.get("headers", []):
        if name == b"x-agent-id":
            return value.decode("latin1").strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin1"))
    return query.get("agent_id", [""])[0].strip()


@database_sync_to_async
def authenticate(raw: str):
    try:
        return key_from_raw(raw)
    except ApiError as exc:
        audit_auth_failure(
            reason=exc.code, key_prefix=(split_raw_key(raw) or ("",))[0], path="/ws/agents/"
        )
        return None


class AgentConsumer(AsyncJsonWebsocketConsumer):
    key = None
    watcher: asyncio.Task | None = None
    agent_id = ""
    agent_group = ""

    async def connect(self) -> None:
        push.bind_loop()
        self.subscriptions: set[str] = set()
        self.key = await authenticate(raw_key_of(self.scope))
        agent_id = agent_id_of(self.scope)
        if self.key is None or (
            agent_id and not (AGENT_ID_RE.match(agent_id) and self.key.allows_agent(agent_id))
        ):
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        ensure_sweeping()
        if agent_id:
            # Pushes addressed to this agent (approval_decided, conflict_notify).
            self.agent_id = agent_id
            self.agent_group = push.group_name("agent", agent_id)
            await self.channel_layer.group_add(self.agent_group, self.channel_name)
        await self.accept()
        metrics.recorder.socket_opened()
        key_watch.register(self.key.prefix, self)

    async def disconnect(self, code: int) -> None:
        if self.watcher is not None:
            self.watcher.cancel()
        if self.key is None:
            return
        key_watch.unregister(self.key.prefix, self)
        if self.agent_group:
            await self.channel_layer.group_discard(self.agent_group, self.channel_name)
        for shard_id in self.subscriptions:
            await self.channel_layer.group_discard(
                push.group_name("shard", shard_id), self.channel_name
            )
        metrics.recorder.socket_closed(self.subscriptions)
        self.key = None

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        try:
            if kind == "ping":
                await self.send_json({"type": "pong"})
            elif kind == "subscribe":
                await self.subscribe(subscription_ids(content, self.key))
            elif kind == "unsubscribe":
                await self.unsubscribe(subscription_ids(content, None))
            elif kind == "watch":
                await self.watch(content)
            else:
                raise ApiError(400, "UNSUPPORTED_MESSAGE", f"Unknown message type {kind!r}.")
        except ApiError as error:
            await self.send_json({"type": "error", **error.envelope()["error"]})

    async def subscribe(self, shard_ids: list[str]) -> None:
        new = set(shard_ids) - self.subscriptions
        for shard_id in new:
            await self.channel_layer.group_add(
                push.group_name("shard", shard_id), self.channel_name
            )
        self.subscriptions |= new
        metrics.recorder.subscribed(new, +1)
        await self.send_json({"type": "subscribed", "shard_ids": shard_ids})

    async def unsubscribe(self, shard_ids: list[str]) -> None:
        gone = set(shard_ids) & self.subscriptions
        for shard_id in gone:
            await self.channel_layer.group_discard(
                push.group_name("shard", shard_id), self.channel_name
            )
        self.subscriptions -= gone
        metrics.recorder.subscribed(gone, -1)
        await self.send_json({"type": "unsubscribed", "shard_ids": shard_ids})

    async def watch(self, content: dict[str, Any]) -> None:
        """Every change after ``since`` under ``prefix``, in revision order, then
        live ones, as ``watch_event`` frames; one watch per socket."""
        prefix = content.get("prefix", "")
        since = content.get("since")
        if not isinstance(prefix, str) or (
            since is not None
            and (not isinstance(since, int) or isinstance(since, bool) or since < 0)
        ):
            raise ApiError(
                400, "VALIDATION_ERROR", "watch takes a prefix string and a since revision."
            )
        since = await database_sync_to_async(watch_start)(key=self.key, prefix=prefix, since=since)
        if self.watcher is not None:
            self.watcher.cancel()
        self.watcher = asyncio.get_running_loop().create_task(self._watch(prefix, since))
        await self.send_json({"type": "watching", "prefix": prefix, "since": since})

    async def _watch(self, prefix: str, since: int) -> None:
        async for change in change_stream(prefix=prefix, since=since):
            if change is not None:
                await self.send_json({"type": "watch_event", **change})

    async def shard_invalidate(self, event: dict[str, Any]) -> None:
        if event["committed_by"] == self.agent_id:
            return  # the committer knows: it just got the new version in its 200
        message = {k: event[k] for k in ("shard_id", "version", "committed_by")}
        await self.send_json({"type": "invalidate", **message})
        metrics.recorder.count(metrics.WS_SENT)

    async def agent_message(self, event: dict[str, Any]) -> None:
        await self.send_json(event["message"])
        metrics.recorder.count(metrics.WS_SENT)


def watch_start(*, key: Any, prefix: str, since: int | None) -> int:
    if since is None:
        since = latest_revision()
    watch_check(prefix=prefix, since=since, key=key)
    return since


MAX_SUBSCRIBE = 1000


def subscription_ids(content: dict[str, Any], key: Any) -> list[str]:
    """The message's shard ids, checked; with a key, also its read permission and scope."""
    shard_ids = content.get("shard_ids")
    if (
        not isinstance(shard_ids, list)
        or not 0 < len(shard_ids) <= MAX_SUBSCRIBE
        or not all(isinstance(s, str) and SHARD_ID.match(s) for s in shard_ids)
    ):
        raise ApiError(
            400,
            "VALIDATION_ERROR",
            f"shard_ids must be a list of 1-{MAX_SUBSCRIBE} shard ids.",
        )
    if key is not None:
        permission_check(key, "shard:read")
        outside = [s for s in shard_ids if not key.allows_shard(s)]
        if outside:
            raise ApiError(
                403,
                "PERMISSION_DENIED",
                "This key may not watch these shards.",
                shard_ids=outside,
            )
    return shard_ids


def can_watch(user: Any) -> bool:
    """Who may watch the live pages: staff, or anyone allowed to see approvals."""
    return bool(
        user.is_authenticated
        and user.is_active
        and (user.is_staff or user.has_perm("approvals.view_approval"))
    )


LIVE_COALESCE_SECONDS = 0.25


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Session-authenticated and read-only: it only forwards what the server pushes.
    Shard changes are coalesced (the newest per shard, at most four batches a
    second), so a storm of commits cannot flood a browser."""

    joined = False

    async def connect(self) -> None:
        push.bind_loop()
        user = self.scope.get("user")
        if user is None or not await database_sync_to_async(can_watch)(user):
            await self.close()
            return
        self.pending: dict[str, dict[str, Any]] = {}
        self.flusher: asyncio.Task | None = None
        ensure_sweeping()
        await self.channel_layer.group_add(push.LIVE_GROUP, self.channel_name)
        self.joined = True
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.joined:
            await self.channel_layer.group_discard(push.LIVE_GROUP, self.channel_name)
            if self.flusher is not None:
                self.flusher.cancel()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def live_event(self, event: dict[str, Any]) -> None:
        message = event["message"]
        if message.get("type") != "shard":
            await self.send_json(message)
            return
        self.pending[message["shard_id"]] = message
        if self.flusher is None:
            self.flusher = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(LIVE_COALESCE_SECONDS)
        changes, self.pending, self.flusher = list(self.pending.values()), {}, None
        await self.send_json({"type": "shards", "changes": changes})
