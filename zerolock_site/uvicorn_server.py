"""uvicorn (httptools + uvloop) serving ZeroLock's ASGI application: HTTP and
WebSockets on one port. `bin/serve` starts it unless ZEROLOCK_SERVER says otherwise.

    python -m zerolock_site.uvicorn_server --host 127.0.0.1 --port 8000

Why a module of our own rather than uvicorn's command line: at shutdown uvicorn
waits for connections, then cancels what still runs and stops without waiting
for it, so a request held past the grace period lost its connection with no
answer while its view went on running (and could commit afterwards). Here the
HTTP bridge drains first (``PooledWsgiToAsgi.drain``: a clean 503 for whatever
outlives ZEROLOCK_DRAIN_SECONDS), then uvicorn shuts down what remains (sockets,
watch streams), and a process that abandoned a view leaves without waiting for it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import os
import resource
import socket
from typing import Any

import uvicorn
from django.conf import settings
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .connection_limits import _CONNECTIONS, _GivesSlotBack, _Slot, _slot_holding
from .raw_answers import closing_json

# What is left once the bridge has drained: sockets and watch streams, which
# end as soon as they are told to.
AFTER_DRAIN_SECONDS = 1
# Settings come from the one settings module (env-driven), read without
# setting Django up: the application import does that.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zerolock_site.settings")


class _HeadWithBody:
    """A transport that sends a response's head in the same write as its body.

    uvicorn writes the status line and headers as soon as the application
    sends them, then the body in a second write: two system calls and two TCP
    segments for every answer (uvicorn's ``send`` held 17 % of a GET's CPU,
    profiled). The head is held here until the next write, which the bridge
    makes in the same step of the loop; a head with no body right behind it (a
    stream, a WebSocket handshake) goes out on the loop's next turn. Order is
    kept, and nothing held outlives ``close``."""

    __slots__ = ("_transport", "_held", "_loop")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= 65536:
                self._transport.write(held + data)
                return
            self._transport.write(held)
            self._transport.write(data)
        elif data.startswith(b"HTTP/1.1 "):
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _HeadTooLarge(Exception):
    """Raised from a parser callback: it stops the parser mid-head, so the head
    never reaches the application."""


class ZeroLockHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with one write per answer, and bounds on what
    a connection may hold before the application sees a request:

    - a request's head: httptools keeps whatever arrives before the blank line,
      so one client sending 50 MB of headers grew the process by 47 MB (Daphne's
      Twisted stopped at 16 KB). Past ZEROLOCK_MAX_HEAD_BYTES the client gets
      431 and the connection is closed.
    - its time: uvicorn starts no timer before a connection's first request,
      and 20,000 silent or half-sent connections held all of a process's
      descriptors. A head not complete ZEROLOCK_HEAD_TIMEOUT_SECONDS after the
      connection opened (kept alive: after its next request's first byte) gets
      408, or, if nothing of it came, just the close.
    - how many: past ZEROLOCK_MAX_CONNECTIONS in the process, or
      ZEROLOCK_MAX_CONNECTIONS_PER_ADDRESS from one address, a new connection
      gets 503 and is closed before anything of it is read. uvicorn's own
      ``limit_concurrency`` is not that bound: it answers 503 to each request
      once a head is complete, and keeps the connection; a silent or half-sent
      one never reaches it, and is held as before."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_read = 0  # bytes of the reads that ended inside this head
        self._read_size = 0  # the read being parsed
        self._head_too_large = False
        self._in_head = False  # some of a head came, not yet all of it
        self._head_timer: asyncio.TimerHandle | None = None
        self._slot: _Slot | None = None
        super().connection_made(_HeadWithBody(transport))  # type: ignore[arg-type]
        slot = _CONNECTIONS.take(self.client[0] if self.client else None)
        if isinstance(slot, bytes):
            self._refuse(slot)
            return
        self._slot = slot
        # Counted from the connection's start: a head dripped a byte at a time
        # gains nothing by it.
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._slot is not None:
            self._slot.release()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        self._head_read = 0
        self._in_head = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        # The head is no larger than the reads it came in: only when they pass
        # the bound are its own bytes counted (the request line and headers as
        # httptools hands them over, so a large body in the same read never
        # counts). Raised, the parser stops: the head never reaches the
        # application, even when all of it came in one read.
        limit = settings.ZEROLOCK_MAX_HEAD_BYTES
        if self._head_read + self._read_size > limit and self._head_size() > limit:
            self._head_too_large = True
            raise _HeadTooLarge
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        self._read_size = len(data)
        super().data_received(data)
        if not self._in_head or self.transport.is_closing():
            return
        # The read ended inside a head, which the parser holds (httptools keeps
        # the header it is in until it ends): counted whole, so at most one
        # read past the bound is ever held.
        self._head_read += len(data)
        if self._head_read > settings.ZEROLOCK_MAX_HEAD_BYTES:
            self._refuse(_headers_too_large())
        elif self._head_timer is None:
            # Kept alive: the head began in this read, its deadline now.
            self._start_head_timer()

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers whatever stopped the parser with 400; a head past its
        # bound stopped it on purpose (on_headers_complete).
        if self._head_too_large:
            self._refuse(_headers_too_large())
        else:
            super().send_400_response(msg)

    def handle_websocket_upgrade(self) -> None:
        configured = self.config.ws_protocol_class  # set: uvicorn upgrades only then
        if configured is not None:
            self.ws_protocol_class = _slot_holding(configured)
        super().handle_websocket_upgrade()
        websocket = self.transport.get_protocol()
        if isinstance(websocket, _GivesSlotBack):
            # The WebSocket protocol has the socket now, and with it the slot.
            websocket.slot, self._slot = self._slot, None

    def _head_size(self) -> int:
        """The request line and headers, each with its ": " and CRLF."""
        method = self.parser.get_method()
        line = len(method) + len(self.url) + len(" HTTP/1.1\r\n") + 1
        return line + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _start_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(
            settings.ZEROLOCK_HEAD_TIMEOUT_SECONDS, self._head_timed_out
        )

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # The late head is pipelined behind a response still going out:
            # the connection closes once that is sent, as at shutdown.
            self.cycle.keep_alive = False
        elif self._in_head:
            from common.errors import request_timeout_envelope

            self._refuse(closing_json(408, b"Request Timeout", request_timeout_envelope()))
        else:
            self.transport.close()

    def _refuse(self, answer: bytes) -> None:
        self.transport.write(answer)
        self.transport.close()


def _headers_too_large() -> bytes:
    from common.errors import headers_too_large_envelope  # Django is set up by now

    return closing_json(431, b"Request Header Fields Too Large", headers_too_large_envelope())


class ZeroLockServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        from zerolock_site.asgi import http_bridge  # loaded by now: uvicorn imported the app

        for server in self.servers:
            server.close()  # no new connections while the requests in flight finish
        await http_bridge.drain()
        await super().shutdown(sockets)


# How far past the body limit a WebSocket message is still read, to be answered
# in the envelope (413 PAYLOAD_TOO_LARGE, close 4413 on /ws/crdt/).
WS_READ_PAST_LIMIT = 4


def ws_max_size() -> int:
    """The largest WebSocket message uvicorn reads: four times the body limit.

    uvicorn's default was 16 MiB, so a 16 MiB Yjs update was read, applied and
    stored past the 1 MiB body limit (hardening round three, M3). A message up to
    this size is read and refused by the application in the envelope
    (``realtime.consumers.message_size_check``), so a client slightly over the
    limit learns it. Past it, websockets checks the length a frame header declares
    before reading its payload: the connection is closed with 1009 (message too
    big) and no envelope, and the payload is never buffered. uvicorn stops reading
    a socket while its last message waits for the application, so one socket
    holds at most one message of this size."""
    return WS_READ_PAST_LIMIT * settings.ZEROLOCK_MAX_BODY_BYTES


def config(host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        "zerolock_site.asgi:application",
        host=host,
        port=port,
        http=ZeroLockHttpProtocol,
        loop="uvloop",
        ws="websockets-sansio",
        # Daphne never compressed frames; deflate would cost CPU on every frame
        # of every fan-out (an invalidation goes to each subscriber).
        ws_per_message_deflate=False,
        ws_max_size=ws_max_size(),
        lifespan="off",
        access_log=False,
        server_header=False,  # a header on every answer that only names the software
        # The client address is the socket's: uvicorn would otherwise take
        # X-Forwarded-For and -Proto from any local peer, and a local process could
        # then pose as any address to the per-address rate limit (decisions.md).
        proxy_headers=False,
        timeout_graceful_shutdown=AFTER_DRAIN_SECONDS,
        # uvicorn's 5 s equals httpx's own pool expiry: a client reusing a
        # connection just as the server closed it lost a POST it cannot safely
        # resend (80 appenders, about once in six runs). Daphne never closed one.
        timeout_keep_alive=settings.ZEROLOCK_KEEP_ALIVE_SECONDS,
        # The supervisor's log carries uvicorn's start and stop lines.
        log_level=settings.ZEROLOCK_SERVER_LOG_LEVEL,
    )


def gc_freeze_loaded() -> None:
    """Moves everything loaded so far out of the garbage collector's sight.

    Once the application is imported, about 130,000 objects (modules, classes,
    URL patterns, Django's app registry) live as long as the process. Each full
    collection walked them all: a pause of 120-170 ms on this machine, during
    which no request in the process moved (measured with bench/handler.py and
    ``gc.callbacks``). Frozen, they are never walked again; a full collection
    then takes a fraction of that. Request garbage is collected as before.

    Measured in the server (``gc.callbacks``), one bench/peer.py run of mixed,
    get, commits and appends on SQLite: 14 full collections holding the process
    2.8 s in all (50-234 ms each) before, 11 holding it 0.9 s (58-112 ms) after."""
    gc.collect()
    gc.freeze()


def raise_descriptor_limit() -> None:
    """Lets the process open as many descriptors as its hard limit allows, as
    servers usually do: the soft limit (often 1024) is a default meant for
    ordinary programs. Before settings are read: ZEROLOCK_MAX_CONNECTIONS's
    default is set below the limit this leaves."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        # An unlimited hard limit may be more than the kernel grants: then as it was.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# glibc's mallopt parameter for the size from which blocks are mmapped.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


def malloc_gives_large_blocks_back() -> None:
    """Large blocks (128 KB and up: request bodies, big values, rendered answers)
    come from their own mappings, which free() hands back to the system.

    glibc raises that threshold by itself each time such a block is freed (up
    to 32 MB), after which big blocks come from the heaps of the server's eight
    threads and stay with the process: eight parallel transactions answering
    4 MB each left it 86 MB larger for good, 35 MB with the threshold fixed
    (tests/coordination/test_txn_memory.py). Fixing it costs a mapping per big
    block, nothing for small requests. Elsewhere than glibc: nothing to do."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    raise_descriptor_limit()
    malloc_gives_large_blocks_back()
    server = ZeroLockServer(config(args.host, args.port))
    server.config.load()  # imports the application (and sets Django up) now
    gc_freeze_loaded()
    server.run()
    from zerolock_site.asgi import http_bridge

    http_bridge.exit_if_abandoned()


if __name__ == "__main__":
    main()
