"""Daphne serving ZeroLock's ASGI application: the one way ZeroLock runs on
Daphne (``ZEROLOCK_SERVER=daphne``).

    python -m zerolock_site.daphne_server --host 127.0.0.1 --port 8000

uvicorn (zerolock_site/uvicorn_server.py) is the server; Daphne, which the
design names, stays possible here, with the patches it needs to be safe
(zerolock_site/daphne_patches.py: without the body limit, one client's 300 MB
body is read whole). Daphne's own command is refused by the application
(``refuse_daphne_without_its_patches``). tests/site/test_daphne.py serves
health, a commit, a socket and refused bodies through this module.
"""

from __future__ import annotations

import argparse
from typing import Any, cast

from .daphne_patches import install_patches


def drain_with_the_reactor() -> None:
    """Daphne cancels every request at shutdown and waits for them
    (``PooledWsgiToAsgi.__call__`` lets each finish, or answers 503); a request
    arriving once shutdown began gets 503 at once, and a process that abandoned
    a view leaves without waiting for it. Imports the application."""
    from twisted.internet import reactor

    from zerolock_site.asgi import http_bridge

    # Twisted's interface types take the reactor itself for the first argument.
    core = cast(Any, reactor)
    core.addSystemEventTrigger("before", "shutdown", http_bridge.stop_taking_requests)
    core.addSystemEventTrigger("after", "shutdown", http_bridge.exit_if_abandoned)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    install_patches()  # before the application loads: it refuses Daphne without them
    from daphne.cli import CommandLineInterface

    drain_with_the_reactor()
    CommandLineInterface().run(
        ["-b", args.host, "-p", str(args.port), "zerolock_site.asgi:application"]
    )


if __name__ == "__main__":
    main()
