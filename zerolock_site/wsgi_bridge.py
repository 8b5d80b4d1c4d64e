"""Serve Django's HTTP side as WSGI on a fixed thread pool inside the ASGI server.

Measured on this kind of machine: Django's own ASGI handler costs several thread
handoffs per request (a new thread per request, signals and the view each hop),
about 4 ms of overhead, so one Daphne process topped out near 70-100 req/s on
the API. Running the same Django app as WSGI on a pool of long-lived threads
costs one handoff per request, and the threads keep their database connections.
WebSockets still go through Channels in the same process, so the in-memory
channel layer keeps working.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from tempfile import SpooledTemporaryFile
from typing import Any

from asgiref.wsgi import WsgiToAsgiInstance
from django.conf import settings

from shards import push
from shards.errors import envelope, internal_error, too_large_envelope

logger = logging.getLogger(__name__)


class PooledWsgiToAsgi:
    def __init__(self, wsgi_application: Any, threads: int) -> None:
        self.wsgi_application = wsgi_application
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="http")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        push.bind_loop()  # services on the pool threads push through this loop
        limit = settings.ZEROLOCK_MAX_BODY_BYTES
        with SpooledTemporaryFile(max_size=65536) as body:
            received = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                received += len(chunk)
                # Counted as it arrives: a chunked body has no Content-Length
                # for Django to check, and was spooled whole before.
                if received > limit:
                    start, content = _json(413, too_large_envelope())
                    break
                body.write(chunk)
                if not message.get("more_body"):
                    body.seek(0)
                    loop = asyncio.get_running_loop()
                    start, content = await loop.run_in_executor(
                        self.executor, self._run_guarded, scope, body
                    )
                    break
        await send(start)
        await send({"type": "http.response.body", "body": content})

    def _run_guarded(self, scope: dict, body: Any) -> tuple[dict, bytes]:
        """Anything that escapes Django (its own handlers catch view and
        middleware errors) would reach Daphne, which answers an HTML page."""
        try:
            return self._run(scope, body)
        except Exception:
            logger.exception("Unhandled error in the WSGI bridge on %s", scope.get("path"))
            if scope.get("path", "").startswith("/api/"):
                return _json(500, internal_error().envelope())
            return _plain(500, b"Internal Server Error")

    def _run(self, scope: dict, body: Any) -> tuple[dict, bytes]:
        # Reuse asgiref's environ building and start_response; only the threading differs.
        instance = WsgiToAsgiInstance(self.wsgi_application)
        instance.scope = scope
        try:
            environ = instance.build_environ(scope, body)
        except ValueError:
            if scope.get("path", "").startswith("/api/"):
                return _json(400, envelope("BAD_REQUEST", "Too many duplicate headers."))
            return _plain(400, b"Bad Request: too many duplicate headers")
        result = self.wsgi_application(environ, instance.start_response)
        try:
            content = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return instance.response_start, content


def _json(status: int, data: dict) -> tuple[dict, bytes]:
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json")],
    }
    return start, json.dumps(data).encode()


def _plain(status: int, text: bytes) -> tuple[dict, bytes]:
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"text/plain")],
    }
    return start, text
