"""The agent WebSocket channel, /ws/agents/ (DESIGN.md section 4.1)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from .auth import key_from_raw, split_raw_key
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

    async def connect(self) -> None:
        self.key = await authenticate(raw_key_of(self.scope))
        if self.key is None:
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        await self.accept()
        key_watch.register(self.key.prefix, self)

    async def disconnect(self, code: int) -> None:
        if self.key is not None:
            key_watch.unregister(self.key.prefix, self)

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
