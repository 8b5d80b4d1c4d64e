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
import os
import socket

import uvicorn

# What is left once the bridge has drained: sockets and watch streams, which
# end as soon as they are told to.
AFTER_DRAIN_SECONDS = 1
# How long an idle kept-alive connection stays open. uvicorn's 5 s equals
# httpx's own pool expiry: a client reusing a connection just as the server
# closed it got a ReadError on a POST it cannot safely resend (80 appenders
# hit it about once in six runs). Well above the clients' expiry, the server
# is never the one to close first; Daphne never closed an idle connection.
KEEP_ALIVE_SECONDS = int(os.environ.get("ZEROLOCK_KEEP_ALIVE_SECONDS", "120"))


class ZeroLockServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        from zerolock_site.asgi import http_bridge  # loaded by now: uvicorn imported the app

        for server in self.servers:
            server.close()  # no new connections while the requests in flight finish
        await http_bridge.drain()
        await super().shutdown(sockets)


def config(host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        "zerolock_site.asgi:application",
        host=host,
        port=port,
        http="httptools",
        loop="uvloop",
        ws="websockets-sansio",
        # Daphne never compressed frames; deflate would cost CPU on every frame
        # of every fan-out (an invalidation goes to each subscriber).
        ws_per_message_deflate=False,
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=AFTER_DRAIN_SECONDS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        # The supervisor's log carries uvicorn's start and stop lines.
        log_level=os.environ.get("ZEROLOCK_SERVER_LOG_LEVEL", "info"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    server = ZeroLockServer(config(args.host, args.port))
    server.run()
    from zerolock_site.asgi import http_bridge

    http_bridge.exit_if_abandoned()


if __name__ == "__main__":
    main()
