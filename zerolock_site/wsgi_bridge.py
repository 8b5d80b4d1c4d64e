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
from concurrent.futures import ThreadPoolExecutor
from tempfile import SpooledTemporaryFile
from typing import Any

from asgiref.wsgi import WsgiToAsgiInstance

from shards import push


class PooledWsgiToAsgi:
    def __init__(self, wsgi_application: Any, threads: int) -> None:
        self.wsgi_application = wsgi_application
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="http")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        push.bind_loop()  # services on the pool threads push through this loop
        with SpooledTemporaryFile(max_size=65536) as body:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body.write(message.get("body", b""))
                if not message.get("more_body"):
                    break
            body.seek(0)
            loop = asyncio.get_running_loop()
            start, content = await loop.run_in_executor(self.executor, self._run, scope, body)
        await send(start)
        await send({"type": "http.response.body", "body": content})

    def _run(self, scope: dict, body: Any) -> tuple[dict, bytes]:
        # Reuse asgiref's environ building and start_response; only the threading differs.
        instance = WsgiToAsgiInstance(self.wsgi_application)
        instance.scope = scope
        try:
            environ = instance.build_environ(scope, body)
        except ValueError:
            return _plain(400, b"Bad Request: too many duplicate headers")
        result = self.wsgi_application(environ, instance.start_response)
        try:
            content = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return instance.response_start, content


def _plain(status: int, text: bytes) -> tuple[dict, bytes]:
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"text/plain")],
    }
    return start, text
