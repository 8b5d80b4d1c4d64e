"""The API, called in this process: for entry points that carry API requests
inside another protocol (/mcp's tool calls, request frames on /ws/agents/).

The web server's HTTP bridge (``zerolock_site.wsgi_bridge.PooledWsgiToAsgi``)
answers them through the whole Django application, so every rule a request
meets over HTTP is met the same way; it registers itself here when the ASGI
application is built (``zerolock_site.asgi``). Nothing registered: every such
request is refused."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from .errors import ApiError, ErrorCode, envelope

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Answer(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> dict[str, str]: ...
    @property
    def content(self) -> bytes: ...


class Api(Protocol):
    def call(
        self,
        *,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes = b"",
        client: tuple[str, int] | None = None,
        server: tuple[str, int] | None = None,
        scheme: str = "http",
    ) -> Awaitable[Answer]: ...

    def run_sync(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...

    @property
    def draining(self) -> bool: ...


_api: Api | None = None


def api_register(api: Api) -> None:
    global _api
    _api = api


def registered_api() -> Api:
    if _api is None:
        raise ApiError(ErrorCode.SHUTTING_DOWN, "This process serves no API requests.")
    return _api


def api_headers(
    *, host: str, raw_key: str, agent_id: str, extra: dict[str, str], json_body: bool
) -> list[tuple[bytes, bytes]]:
    """The headers of an in-process request made as ``raw_key`` and ``agent_id``:
    what an HTTP client of the same key and agent would send, plus ``extra``
    (the few headers the carrying protocol lets its caller set)."""
    sent = {"host": host, "x-api-key": raw_key, "accept": "application/json"}
    if json_body:
        sent["content-type"] = "application/json"
    if agent_id:
        sent["x-agent-id"] = agent_id
    sent |= {name.lower(): value for name, value in extra.items()}
    return [(k.encode("latin-1"), v.encode("utf-8")) for k, v in sent.items()]


def answer_body(answer: Answer) -> Any:
    """An in-process answer's body: JSON as JSON; anything else (the OpenAPI
    document as YAML) as its text; nothing as None."""
    if not answer.content:
        return None
    if "json" in answer.headers.get("content-type", ""):
        try:
            return json.loads(answer.content)
        except ValueError:
            logger.error("An answer labelled JSON that is not JSON (status %s)", answer.status)
            return envelope(ErrorCode.INTERNAL_ERROR, "Internal server error.")
    return answer.content.decode("utf-8", "replace")
