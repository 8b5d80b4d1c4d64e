"""The API, called in this process: for entry points that carry API requests
inside another protocol (/mcp's tool calls, request frames on /ws/agents/).

The web server's HTTP bridge (``zerolock_site.wsgi_bridge.PooledWsgiToAsgi``)
answers them through the whole Django application, so every rule a request
meets over HTTP is met the same way; it registers itself here when the ASGI
application is built (``zerolock_site.asgi``). Nothing registered: every such
request is refused."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from .errors import ApiError, ErrorCode

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
