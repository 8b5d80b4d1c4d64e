"""Autobahn pretty-prints debug output for every WebSocket, whether or not debug
logging is on.

``WebSocketProtocol._connectionMade`` builds ``pformat`` of some 40 config
attributes, and ``startHandshake`` of the transport details, as arguments to
``log.debug`` calls that are then dropped. Measured (py-spy --gil on Daphne under
300 handshakes a second, bench/handshake_flood.py), that was 9 % of the server's
CPU, paid by every socket, honest or not. ``repr`` gives the same information on
one line at a fraction of the cost; only those debug lines change.

Installed once from ``zerolock_site/asgi.py``; tests/site/test_autobahn_debug.py
fails if autobahn stops reading the name this replaces.
"""

from __future__ import annotations


def install_autobahn_cheap_debug() -> None:
    from autobahn.websocket import protocol

    protocol.pformat = repr  # type: ignore[assignment]
