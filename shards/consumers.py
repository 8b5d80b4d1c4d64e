"""The agent WebSocket channel, /ws/agents/ (DESIGN.md section 4.1), and the
pages' read-only channel, /ws/live/ (section 4.3)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from approvals.sweeper import ensure_sweeping

from . import push
from .auth import AGENT_ID_RE, key_from_raw, split_raw_key
from .errors import ApiError
from .keywatch import key_watch
from .services import audit_auth_failure


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
    agent_group = ""

    async def connect(self) -> None:
        push.bind_loop()
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
            self.agent_group = push.group_name("agent", agent_id)
            await self.channel_layer.group_add(self.agent_group, self.channel_name)
        await self.accept()
        key_watch.register(self.key.prefix, self)

    async def disconnect(self, code: int) -> None:
        if self.key is not None:
            key_watch.unregister(self.key.prefix, self)
        if self.agent_group:
            await self.channel_layer.group_discard(self.agent_group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "ping":
            await self.send_json({"type": "pong"})
            return
        await self.send_json(
            {
                "type": "error",
                "code": "UNSUPPORTED_MESSAGE",
                "message": f"Unknown message type {kind!r}.",
            }
        )

    async def approval_decided(self, event: dict[str, Any]) -> None:
        await self.send_json(event["message"])


def can_watch(user: Any) -> bool:
    """Who may watch the live pages: staff, or anyone allowed to see approvals."""
    return bool(
        user.is_authenticated
        and user.is_active
        and (user.is_staff or user.has_perm("approvals.view_approval"))
    )


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Session-authenticated and read-only: it only forwards what the server pushes."""

    joined = False

    async def connect(self) -> None:
        push.bind_loop()
        user = self.scope.get("user")
        if user is None or not await database_sync_to_async(can_watch)(user):
            await self.close()
            return
        ensure_sweeping()
        await self.channel_layer.group_add(push.LIVE_GROUP, self.channel_name)
        self.joined = True
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.joined:
            await self.channel_layer.group_discard(push.LIVE_GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def live_event(self, event: dict[str, Any]) -> None:
        await self.send_json(event["message"])
