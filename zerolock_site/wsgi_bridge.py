"""Serve Django's HTTP side as WSGI on a fixed thread pool inside the ASGI server.

Measured on this kind of machine: Django's own ASGI handler costs several thread
handoffs per request (a new thread per request, signals and the view each hop),
about 4 ms of overhead, so one Daphne process topped out near 70-100 req/s on
the API. Running the same Django app as WSGI on a pool of long-lived threads
costs one handoff per request, and the threads keep their database connections.
WebSockets still go through Channels in the same process, so the in-memory
channel layer keeps working.

The bridge is also where uvicorn's requests meet the body limit: uvicorn hands
the body over as it arrives, and stops reading the socket while the bridge is
not asking for more. A body declared past ``ZEROLOCK_MAX_BODY_BYTES`` is
refused before any of it is read, a chunked one as soon as the count passes it
(``common.errors.over_body_limit``, the one rule). Django checks nothing more
(DATA_UPLOAD_MAX_MEMORY_SIZE is off): what reaches it is within the limit.
"""

from __future__ import annotations

import asyncio
import atexit
import io
import json
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from tempfile import SpooledTemporaryFile
from typing import Any, TypeVar

from asgiref.wsgi import WsgiToAsgiInstance
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpResponse

from common.errors import ErrorCode, envelope, internal_error, over_body_limit, too_large_envelope
from common.paths import is_api_path
from realtime import push
from zerolock_site import direct

logger = logging.getLogger(__name__)
T = TypeVar("T")
# Marks the scope of a request made in this process (``call``): only those may take
# the direct lane (zerolock_site/direct.py); HTTP requests take the full application.
IN_PROCESS = "zerolock.in_process"


@dataclass(frozen=True)
class InProcessAnswer:
    status: int
    headers: dict[str, str]
    content: bytes

    @classmethod
    def of(cls, start: dict, content: bytes) -> InProcessAnswer:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in start["headers"]}
        return cls(status=start["status"], headers=headers, content=content)


class PooledWsgiToAsgi:
    def __init__(self, wsgi_application: Any, threads: int) -> None:
        self.wsgi_application = wsgi_application
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="http")
        self.draining = False
        self.abandoned = 0  # requests answered 503 while their view still ran
        # The tasks awaiting a view, for drain() to cut short at its deadline.
        self._in_flight: set[asyncio.Task] = set()
        self._drain_expired = False

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        if self.draining:  # arrived on a kept-alive connection after shutdown began
            await _send(send, *_shutting_down())
            return
        push.bind_loop()  # services on the pool threads push through this loop
        if over_body_limit(_declared_length(scope)):
            # Before the first receive(): uvicorn has read none of the body, and
            # a client waiting on "Expect: 100-continue" never sends it.
            await _send(send, *_too_large())
            return
        # The pool thread owns the body once the view runs and closes it when done:
        # closed any earlier (Daphne cancels this coroutine at shutdown), the view
        # still reading it failed with 500 "I/O operation on closed file".
        body = SpooledTemporaryFile(max_size=65536)  # noqa: SIM115 closed by _run_guarded
        try:
            received = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    body.close()
                    return
                chunk = message.get("body", b"")
                received += len(chunk)
                # Counted as it arrives: a chunked body declares no length, and
                # was spooled whole before.
                if over_body_limit(received):
                    body.close()
                    await _send(send, *_too_large())
                    return
                body.write(chunk)
                if not message.get("more_body"):
                    break
            body.seek(0)
        except BaseException:
            body.close()
            raise
        start, content = await self._answer(scope, body)
        await _send(send, start, content)

    async def call(
        self,
        *,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes = b"",
        client: tuple[str, int] | None = None,
        server: tuple[str, int] | None = None,
        scheme: str = "http",
    ) -> InProcessAnswer:
        """One API request made in this process, answered exactly as over HTTP:
        the same middleware (rate limits, idempotency), authentication, views,
        services and audit, since it is the same Django application. For entry
        points that carry API calls inside another protocol (/mcp): a second
        copy of any rule there would drift."""
        if self.draining:
            start, content = _shutting_down()
            return InProcessAnswer.of(start, content)
        push.bind_loop()
        if over_body_limit(len(body)):
            return InProcessAnswer.of(*_too_large())
        route, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": scheme,
            "path": route,
            "raw_path": route.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
            "client": client,
            "server": server,
            IN_PROCESS: True,
        }
        start, content = await self._answer(scope, io.BytesIO(body))
        return InProcessAnswer.of(start, content)

    async def run_sync(self, fn: Callable[..., T], /, *args: Any) -> T:
        """A piece of domain work besides a request (the /mcp key check, an
        approval's status while a call waits on it) on the pool's threads, with the
        connection handling Django gives each request around it."""

        def guarded() -> T:
            close_old_connections()
            try:
                return fn(*args)
            finally:
                close_old_connections()

        return await asyncio.get_running_loop().run_in_executor(self.executor, guarded)

    async def _answer(self, scope: dict, body: Any) -> tuple[dict, bytes]:
        """The view's answer from the pool; the pool thread closes ``body``."""
        loop = asyncio.get_running_loop()
        answer = loop.run_in_executor(self.executor, self._run_guarded, scope, body)
        task = asyncio.current_task()
        if task is not None:
            self._in_flight.add(task)
        try:
            start, content = await asyncio.shield(answer)
        except asyncio.CancelledError:
            if self._drain_expired:  # drain() gave up waiting for this one
                self.abandoned += 1
                start, content = _shutting_down()
            else:
                # Daphne (daphne_server.py) cancels every request at shutdown,
                # then waits for them: let this one finish, or answer a clean
                # 503 if it takes too long.
                try:
                    start, content = await asyncio.wait_for(
                        asyncio.shield(answer), settings.ZEROLOCK_DRAIN_SECONDS
                    )
                except TimeoutError:
                    self.abandoned += 1
                    start, content = _shutting_down()
        finally:
            self._in_flight.discard(task)
        return start, content

    def stop_taking_requests(self) -> None:
        """From now on a request is answered 503 SHUTTING_DOWN (Daphne calls this
        as its shutdown begins: zerolock_site/daphne_server.py)."""
        self.draining = True

    async def drain(self) -> None:
        """Shutdown for servers that do not cancel requests themselves (uvicorn,
        zerolock_site/uvicorn_server.py): a request arriving from now on is
        answered 503; those in flight get ZEROLOCK_DRAIN_SECONDS to finish, then a 503
        each. Returns once every answer is handed to the server."""
        self.stop_taking_requests()
        deadline = time.monotonic() + settings.ZEROLOCK_DRAIN_SECONDS
        while self._in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not self._in_flight:
            return
        self._drain_expired = True
        waiting = list(self._in_flight)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)

    def exit_if_abandoned(self) -> None:
        """A view answered 503 still runs in its thread (waiting for a lock, say);
        the interpreter would wait for it at exit and might then commit a write
        its client was told failed. Flush what atexit flushes, then leave: its
        open transaction dies with the process."""
        if self.abandoned:
            atexit._run_exitfuncs()
            os._exit(0)

    def _run_guarded(self, scope: dict, body: Any) -> tuple[dict, bytes]:
        """Anything that escapes Django (its own handlers catch view and
        middleware errors) would reach the server, which answers with a page of
        its own (Daphne's is HTML), never the envelope."""
        try:
            return self._run(scope, body)
        except Exception:
            logger.exception("Unhandled error in the WSGI bridge on %s", scope.get("path"))
            if is_api_path(scope.get("path", "")):
                return _json(500, internal_error().envelope())
            return _plain(500, b"Internal Server Error")
        finally:
            body.close()

    def _run(self, scope: dict, body: Any) -> tuple[dict, bytes]:
        # Reuse asgiref's environ building and start_response; only the threading differs.
        instance = WsgiToAsgiInstance(self.wsgi_application)
        instance.scope = scope
        try:
            environ = instance.build_environ(scope, body)
        except ValueError:
            if is_api_path(scope.get("path", "")):
                return _json(400, envelope(ErrorCode.BAD_REQUEST, "Too many duplicate headers."))
            return _plain(400, b"Bad Request: too many duplicate headers")
        if scope.get(IN_PROCESS) and (match := direct.direct_view(environ)) is not None:
            response = direct.direct_answer(match, environ)
            if response is not None:
                return _start_of(response), response.content
            # Not answered there, and nothing read of the body: the full application.
        result = self.wsgi_application(environ, instance.start_response)
        try:
            content = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return instance.response_start, content


def _start_of(response: HttpResponse) -> dict:
    """The ASGI start message of a response made without the WSGI handler."""
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
    headers.append((b"content-length", b"%d" % len(response.content)))
    return {"type": "http.response.start", "status": response.status_code, "headers": headers}


async def _send(send: Any, start: dict, content: bytes) -> None:
    await send(start)
    await send({"type": "http.response.body", "body": content})


def _declared_length(scope: dict) -> int:
    """The Content-Length a request declares, 0 if none."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.isdigit():
            # uvicorn's parser refuses a length past 64 bits (400) and Daphne's
            # patch any past the limit; this bounds int()'s work regardless.
            return int(value) if len(value) <= 20 else 1 << 70
    return 0


def _too_large() -> tuple[dict, bytes]:
    start, content = _json(413, too_large_envelope())
    # The rest of the body is never read, so the connection cannot carry
    # another request: close tells the server to drop it.
    start["headers"].append((b"connection", b"close"))
    return start, content


def _shutting_down() -> tuple[dict, bytes]:
    message = (
        "The server is shutting down and stopped waiting for this request, which it "
        "abandons: read the shard before retrying, or retry with the same Idempotency-Key."
    )
    start, content = _json(503, envelope(ErrorCode.SHUTTING_DOWN, message))
    start["headers"] += [(b"retry-after", b"1"), (b"connection", b"close")]
    return start, content


def _json(status: int, data: dict) -> tuple[dict, bytes]:
    return _whole(status, b"application/json", json.dumps(data).encode())


def _plain(status: int, text: bytes) -> tuple[dict, bytes]:
    return _whole(status, b"text/plain", text)


def _whole(status: int, content_type: bytes, content: bytes) -> tuple[dict, bytes]:
    """A length, or uvicorn sends the answer chunked (Daphne added one itself)."""
    headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(content))]
    return {"type": "http.response.start", "status": status, "headers": headers}, content
