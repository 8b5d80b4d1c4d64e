"""The agent WebSocket channel, /ws/agents/ (docs/api.md), and the
pages' read-only channel, /ws/live/."""

from __future__ import annotations

import asyncio
import json
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from channels.auth import get_user
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from access.auth import agent_check, can_watch, permission_check, reads_check, scope_check
from access.handshakes import handshake_blocked, handshake_key
from access.keys import split_raw_key
from approvals.routing import seen_groups, sees
from common.errors import (
    ApiError,
    ErrorCode,
    Invalid,
    PayloadTooLarge,
    over_body_limit,
)
from common.ids import is_shard_id
from coordination.watch import watch_start
from metrics import record
from realtime import push, requests
from realtime.fanout import fanout
from realtime.keywatch import key_watch
from realtime.presence import presence_close, presence_open
from realtime.sweeper import ensure_sweeping, sweeping_release
from realtime.watch import change_stream, open_watches


class LeanDispatch:
    """Handles a message without channels' per-message ``close_old_connections``.

    channels runs it before every message a consumer handles (the handshake, each
    frame, each push, the disconnect), as a hop through the one shared sync
    thread: 14 % of the server's CPU under 300 handshakes a second, and a queue
    every socket's messages waited in. Every database call in these consumers
    goes through ``database_sync_to_async``, which closes stale connections
    around the call itself, so nothing is lost by skipping it here."""

    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


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


CLOSE_RATE_LIMITED = 4429
CLOSE_NOT_ALLOWED = 4403


def message_size_check(text_data: str | None, bytes_data: bytes | None) -> None:
    """A WebSocket message is held to the request body limit (413
    PAYLOAD_TOO_LARGE). uvicorn itself reads none above four times the limit
    (zerolock_site/uvicorn_server.py); this answers the ones between in the
    envelope, before anything parses them."""
    size = len(bytes_data) if bytes_data is not None else 0
    if text_data is not None:
        # A character is 1 to 4 bytes: encode only when the count cannot decide.
        size = len(text_data)
        if not over_body_limit(size):
            size = len(text_data.encode())
    if over_body_limit(size):
        raise PayloadTooLarge("A WebSocket message")


class AgentConsumer(LeanDispatch, push.BatchedPushes, AsyncJsonWebsocketConsumer):
    key = None
    watcher: asyncio.Task | None = None
    watch_prefix: str | None = None
    agent_id = ""
    agent_group = ""
    session_id: int | None = None

    async def connect(self) -> None:
        push.bind_loop()
        self.subscriptions: set[str] = set()
        raw_key = raw_key_of(self.scope)
        if handshake_blocked(self.scope) and split_raw_key(raw_key) is None:
            await self.close(code=CLOSE_RATE_LIMITED)  # before accept: HTTP 403, no work
            return
        try:
            key = await database_sync_to_async(handshake_key)(scope=self.scope, raw_key=raw_key)
        except ApiError as refusal:
            if refusal.status == 429:
                await self.accept()
                await self.send_json({"type": "error", **refusal.envelope()["error"]})
                await self.close(code=CLOSE_RATE_LIMITED)
            else:
                await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        agent_id = agent_id_of(self.scope)
        try:
            agent_check(key, agent_id)
        except ApiError:
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        self.key = key
        self.in_flight: set[asyncio.Task] = set()  # request frames being answered
        ensure_sweeping()
        await fanout.ensure_listening()
        if agent_id:
            # Pushes addressed to this agent (approval_decided, conflict_notify), as
            # sent by this key: another key claiming the same agent id gets none.
            self.agent_id = agent_id
            self.agent_group = push.agent_group(key.prefix, agent_id)
            await self.channel_layer.group_add(self.agent_group, self.channel_name)
            self.session_id = await presence_open(key_prefix=key.prefix, agent_id=agent_id)
        await self.accept()
        record.recorder.socket_opened()
        key_watch.register(key, self)

    async def disconnect(self, code: int) -> None:
        self._unwatch()
        for task in getattr(self, "in_flight", ()):
            # Its request still finishes in the API's thread (a write is not torn);
            # only the answer, which has nowhere to go, is dropped.
            task.cancel()
        if self.key is None:
            return
        key_watch.unregister(self.key.prefix, self)
        sweeping_release()
        if self.agent_group:
            await self.channel_layer.group_discard(self.agent_group, self.channel_name)
        if self.session_id is not None:
            await presence_close(self.session_id)
            self.session_id = None
        fanout.discard(self, self.subscriptions)
        record.recorder.socket_closed(self.subscriptions)
        self.key = None

    async def key_changed(self, key: Any) -> None:
        """The key's grants changed (keywatch): keep going on the new ones if they
        still cover what this socket does, otherwise close it (4403)."""
        reads = set(self.subscriptions)
        if self.watch_prefix is not None:
            reads.add(self.watch_prefix)
        try:
            reads_check(key, agent_id=self.agent_id, shard_ids=reads)
        except ApiError:
            await self.close(code=CLOSE_NOT_ALLOWED)
            return
        self.key = key

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Bad input gets an error frame, never a server error: a frame that is
        not JSON text used to close the socket with 1011."""
        try:
            message_size_check(text_data, bytes_data)  # before anything parses it
            try:
                content = json.loads(text_data) if text_data is not None else None
            except (ValueError, RecursionError):
                content = None
            if content is None:
                raise Invalid("Send JSON text frames.")
        except ApiError as error:
            await self.send_json({"type": "error", **error.envelope()["error"]})
            return
        await self.receive_json(content)

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
            elif kind == "request":
                await self.request(content)
            else:
                raise ApiError(ErrorCode.UNSUPPORTED_MESSAGE, f"Unknown message type {kind!r}.")
        except ApiError as error:
            await self.send_json({"type": "error", **error.envelope()["error"]})

    async def request(self, content: dict[str, Any]) -> None:
        """An API request over this socket (realtime.requests): answered by a
        ``response`` frame with its id when it finishes, in any order."""
        request_id = requests.frame_id(content)
        if request_id is None:
            raise Invalid(
                f"A request frame needs an id: a string of 1-{requests.MAX_ID} characters or an integer."
            )
        limit = requests.in_flight_limit()
        if len(self.in_flight) >= limit:
            await self.send_json(
                requests.refused_frame(request_id, requests.in_flight_refusal(limit))
            )
            return
        try:
            frame = requests.request_frame_check(content, request_id)
        except ApiError as refusal:
            await self.send_json(requests.refused_frame(request_id, refusal))
            return
        task = asyncio.get_running_loop().create_task(self._answer(frame))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _answer(self, frame: requests.RequestFrame) -> None:
        headers = dict(self.scope.get("headers", []))
        answer = await requests.request_answer(
            frame,
            raw_key=raw_key_of(self.scope),
            agent_id=self.agent_id,
            host=headers.get(b"host", b"").decode("latin-1"),
            client=self.scope.get("client"),
            server=self.scope.get("server"),
        )
        if self.key is not None:  # still open
            await self.send(text_data=answer)

    async def subscribe(self, shard_ids: list[str]) -> None:
        new = set(shard_ids) - self.subscriptions
        subscription_cap_check(len(self.subscriptions), len(new))  # all or nothing
        fanout.add(self, new)  # O(1) per id: a local map, no channel-layer call
        self.subscriptions |= new
        record.recorder.subscribed(new, +1)
        await self.send_json({"type": "subscribed", "shard_ids": shard_ids})

    async def unsubscribe(self, shard_ids: list[str]) -> None:
        gone = set(shard_ids) & self.subscriptions
        fanout.discard(self, gone)
        self.subscriptions -= gone
        record.recorder.subscribed(gone, -1)
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
            raise Invalid("watch takes a prefix string and a since revision.")
        key = self.key
        assert key is not None  # set before the socket was accepted
        since = await database_sync_to_async(watch_start)(key=key, prefix=prefix, since=since)
        if self.watcher is None:
            # One watch per socket, counted with the key's SSE streams.
            open_watches.acquire(key.prefix)
        else:
            self.watcher.cancel()
        self.watch_prefix = prefix
        self.watcher = asyncio.get_running_loop().create_task(self._watch(prefix, since))
        await self.send_json({"type": "watching", "prefix": prefix, "since": since})

    def _unwatch(self) -> None:
        if self.watcher is not None:
            self.watcher.cancel()
            self.watcher = None
            if self.key is not None:
                open_watches.release(self.key.prefix)

    async def _watch(self, prefix: str, since: int) -> None:
        async for change in change_stream(prefix=prefix, since=since):
            if change is not None:
                await self.send_json({"type": "watch_event", **change})

    async def shard_invalidate(self, event: dict[str, Any]) -> None:
        """From this process's fanout, for a shard this socket subscribes to."""
        shard_id = event["shard_id"]
        if self.key is None or shard_id not in self.subscriptions:
            return
        if event.get("deleted"):
            # The shard is gone: a last notice, and the subscription ends with it,
            # so a shard re-created under this id starts with no subscribers.
            fanout.discard(self, {shard_id})
            self.subscriptions.discard(shard_id)
            record.recorder.subscribed({shard_id}, -1)
            await self.send_json(
                {
                    "type": "invalidate",
                    "shard_id": shard_id,
                    "version": None,
                    "committed_by": event["committed_by"],
                    "deleted": True,
                }
            )
            record.recorder.count(record.WS_SENT)
            return
        if event["committed_by"] == self.agent_id:
            return  # the committer knows: it just got the new version in its 200
        message = {k: event[k] for k in ("shard_id", "version", "committed_by")}
        await self.send_json({"type": "invalidate", **message})
        record.recorder.count(record.WS_SENT)

    async def agent_message(self, event: dict[str, Any]) -> None:
        message = event["message"]
        shard_id = message.get("shard_id")
        # Delivery re-checks the key's scope: a push carries the shard's values.
        if self.key is None or (shard_id is not None and not self.key.allows_shard(shard_id)):
            return
        await self.send_json(message)
        record.recorder.count(record.WS_SENT)


MAX_SUBSCRIBE = 1000


def subscription_cap_check(held: int, adding: int) -> None:
    """At most ZEROLOCK_MAX_SUBSCRIPTIONS_PER_SOCKET ids per socket; past it the
    whole message is refused and nothing of it applied."""
    cap = settings.ZEROLOCK_MAX_SUBSCRIPTIONS_PER_SOCKET
    if held + adding > cap:
        raise ApiError(
            ErrorCode.TOO_MANY_SUBSCRIPTIONS,
            f"A socket holds at most {cap} subscriptions ({held} held, {adding} new).",
            limit=cap,
            subscriptions=held,
        )


def subscription_ids(content: dict[str, Any], key: Any) -> list[str]:
    """The message's shard ids, checked; with a key, also its read permission and scope."""
    shard_ids = content.get("shard_ids")
    if (
        not isinstance(shard_ids, list)
        or not 0 < len(shard_ids) <= MAX_SUBSCRIBE
        or not all(is_shard_id(s) for s in shard_ids)
    ):
        raise Invalid(
            f"shard_ids must be a list of 1-{MAX_SUBSCRIBE} shard ids.",
        )
    if key is not None:
        permission_check(key, "shard:read")
        scope_check(key, shard_ids)
    return shard_ids


LIVE_COALESCE_SECONDS = 0.25
LIVE_SESSION_POLL_SECONDS = 1.0
CLOSE_SIGNED_OUT = 4401


class LiveConsumer(LeanDispatch, AsyncJsonWebsocketConsumer):
    """Session-authenticated and read-only: it only forwards what the server pushes.
    Shard changes are coalesced (the newest per shard, at most four batches a
    second), so a storm of commits cannot flood a browser."""

    joined = False
    checker: asyncio.Task | None = None
    # approvals.routing.seen_groups of the signed-in user, read again with the
    # session: approval events of requests routed elsewhere never reach the page.
    routed_to: frozenset[int] | None = frozenset()

    async def connect(self) -> None:
        push.bind_loop()
        user = self.scope.get("user")
        if user is None or not await database_sync_to_async(can_watch)(user):
            await self.close()
            return
        self.routed_to = await database_sync_to_async(seen_groups)(user)
        self.pending: dict[str, dict[str, Any]] = {}
        self.flusher: asyncio.Task | None = None
        ensure_sweeping()
        await fanout.ensure_listening()
        fanout.add_live(self)
        self.joined = True
        await self.accept()
        self.checker = asyncio.get_running_loop().create_task(self._session_checked())

    async def disconnect(self, code: int) -> None:
        if self.joined:
            sweeping_release()
            fanout.discard_live(self)
            if self.flusher is not None:
                self.flusher.cancel()
            if self.checker is not None:
                self.checker.cancel()

    async def _session_checked(self) -> None:
        """The page's socket lives as long as its sign-in: once the session is
        logged out or expires, its user is deactivated, changes password or may
        no longer watch, the socket closes (4401) within LIVE_SESSION_POLL_SECONDS.
        The session is read afresh each time, through the same rule that signed
        the socket in (channels' ``get_user``, then ``can_watch``)."""
        session_key = getattr(self.scope.get("session"), "session_key", None)
        store_class = import_module(settings.SESSION_ENGINE).SessionStore
        while True:
            await asyncio.sleep(LIVE_SESSION_POLL_SECONDS)
            user = await get_user({"session": store_class(session_key=session_key)})
            if not await database_sync_to_async(can_watch)(user):
                await self.close(code=CLOSE_SIGNED_OUT)
                return
            self.routed_to = await database_sync_to_async(seen_groups)(user)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def live_event(self, event: dict[str, Any]) -> None:
        message = event["message"]
        if message.get("type") == "approval":
            if not sees(self.routed_to, frozenset(message.get("groups", ()))):
                return
            message = {k: v for k, v in message.items() if k != "groups"}
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
