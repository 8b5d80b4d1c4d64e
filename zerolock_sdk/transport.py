"""The agent socket (/ws/agents/) as a transport for API requests.

One ``AgentSocket`` is one connection at a time and one reader task: a
``response`` frame resolves the request waiting for its id, any other frame
(invalidate, conflict_notify, approval_decided, watch events, ...) is handed,
in order, to ``on_push``. When the connection closes, every request still
waiting is failed with ``SocketDown`` (its caller sends it over HTTP instead)
and the socket reconnects in the background with backoff, calling
``on_open`` each time it is open again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

logger = logging.getLogger("zerolock_sdk")

# Below the server's ZEROLOCK_WS_MAX_IN_FLIGHT (64), so a client never gets its
# 429 TOO_MANY_IN_FLIGHT: past this many, requests wait for a free slot.
MAX_IN_FLIGHT = 32
RECONNECT_FIRST_DELAY = 0.05
RECONNECT_MAX_DELAY = 5.0

Push = Callable[[dict[str, Any]], Awaitable[None]]
Opened = Callable[[], Awaitable[None]]


class SocketDown(Exception):
    """The socket was not open, or closed (or went silent) before this
    request's answer: send it over HTTP instead."""


@dataclass(frozen=True)
class SocketAnswer:
    status: int
    body: Any
    headers: dict[str, str]


def frame_body(json_body: Any) -> bytes:
    """A JSON body as the server encodes a request frame's body before the API
    sees it (``json.dumps`` with its defaults, realtime/requests.py). An HTTP
    request sending these bytes is the same request to the server's
    Idempotency-Key check, so a write can move from the socket to HTTP."""
    return json.dumps(json_body).encode()


class AgentSocket:
    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        *,
        timeout: float = 30.0,
        on_push: Push | None = None,
        on_open: Opened | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.url = url
        self.headers = headers
        self.timeout = timeout
        self.connection: ClientConnection | None = None
        self.reconnects = 0  # times it was open again after closing
        self.answered = 0  # requests answered over it
        self._on_push = on_push
        self._on_open = on_open
        self._slots = asyncio.Semaphore(max_in_flight)
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[SocketAnswer]] = {}
        self._pushes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    @property
    def is_open(self) -> bool:
        return self.connection is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def connect(self) -> None:
        """Opens the first connection (raising if it cannot), then reads it."""
        self.connection = await self._open()
        await self._opened()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read()), loop.create_task(self._deliver())]

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        connection, self.connection = self.connection, None
        self._fail_pending()
        if connection is not None:
            await connection.close()

    async def send_json(self, message: dict[str, Any]) -> None:
        """A frame that has no answer of its own (subscribe, watch)."""
        connection = self.connection
        if connection is None:
            raise SocketDown()
        try:
            await connection.send(json.dumps(message))
        except websockets.ConnectionClosed:
            raise SocketDown() from None

    async def request(
        self, method: str, path: str, body: Any, headers: dict[str, str]
    ) -> SocketAnswer:
        """The server's answer to one request frame; ``SocketDown`` when there is none."""
        async with self._slots:
            connection = self.connection
            if connection is None:
                raise SocketDown()
            self._next_id += 1
            request_id = self._next_id
            frame: dict[str, Any] = {
                "type": "request",
                "id": request_id,
                "method": method,
                "path": path,
            }
            if body is not None:
                frame["body"] = body
            if headers:
                frame["headers"] = headers
            answer = self._pending[request_id] = asyncio.get_running_loop().create_future()
            try:
                await connection.send(json.dumps(frame))
                return await asyncio.wait_for(answer, self.timeout)
            except (websockets.ConnectionClosed, TimeoutError):
                raise SocketDown() from None
            finally:
                self._pending.pop(request_id, None)

    # --- the reader ------------------------------------------------------------------

    async def _open(self) -> ClientConnection:
        # No size cap on what arrives: an answer is as large as the HTTP one
        # would be (a shard's value can be 16 MiB).
        return await websockets.connect(self.url, additional_headers=self.headers, max_size=None)

    async def _read(self) -> None:
        while not self._closed:
            connection = self.connection
            if connection is not None:
                with contextlib.suppress(websockets.ConnectionClosed):
                    async for message in connection:
                        try:
                            frame = json.loads(message)
                        except ValueError:
                            continue  # not the server's: nothing to route
                        if isinstance(frame, dict):
                            self._route(frame)
                self.connection = None
                self._fail_pending()
            await self._reopen()

    def _route(self, frame: dict[str, Any]) -> None:
        if frame.get("type") == "response":
            request_id = frame.get("id")
            answer = self._pending.pop(request_id) if request_id in self._pending else None
            if answer is not None and not answer.done():
                self.answered += 1
                answer.set_result(
                    SocketAnswer(
                        frame.get("status", 0), frame.get("body"), frame.get("headers", {})
                    )
                )
        elif self._on_push is not None:
            self._pushes.put_nowait(frame)

    def _fail_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for answer in pending.values():
            if not answer.done():
                answer.set_exception(SocketDown())

    async def _reopen(self) -> None:
        delay = RECONNECT_FIRST_DELAY
        while not self._closed:
            await asyncio.sleep(delay)
            try:
                connection = await self._open()
            except (OSError, websockets.WebSocketException, TimeoutError) as error:
                logger.debug("agent socket reconnect failed: %s", error)
                delay = min(delay * 2, RECONNECT_MAX_DELAY)
                continue
            self.connection = connection
            self.reconnects += 1
            await self._opened()
            return

    async def _opened(self) -> None:
        if self._on_open is not None:
            # Closed again at once: the reader sees it and opens it again.
            with contextlib.suppress(SocketDown):
                await self._on_open()

    async def _deliver(self) -> None:
        # Pushes are handled here, not in the reader: a handler that sends a
        # request over this socket (a conflict callback re-reading a shard)
        # must not wait for an answer only the reader it blocks could route.
        while True:
            frame = await self._pushes.get()
            assert self._on_push is not None
            try:
                await self._on_push(frame)
            except Exception:
                logger.exception("handling a %s push failed", frame.get("type"))
