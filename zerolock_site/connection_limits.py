"""The bound on the connections one web process holds: ZEROLOCK_MAX_CONNECTIONS
in all and ZEROLOCK_MAX_CONNECTIONS_PER_ADDRESS from one client address.

A connection takes a slot when it opens (or is answered 503 SERVER_BUSY and
closed) and gives it back once its socket is gone, whether the HTTP protocol or
the WebSocket one it became holds it then. Separate from
``zerolock_site.uvicorn_server``, whose HTTP protocol takes the slots: the
count and its slots are one thing, apart from how uvicorn is set up and run.
"""

from __future__ import annotations

import asyncio

from django.conf import settings

from .raw_answers import closing_json


class _Slot:
    """One connection's place in ``_Connections``, given back once, when its
    socket is gone (by the HTTP protocol, or by the WebSocket one it became)."""

    __slots__ = ("_connections", "_address")

    def __init__(self, connections: _Connections, address: str | None) -> None:
        self._connections: _Connections | None = connections
        self._address = address

    def release(self) -> None:
        if self._connections is not None:
            self._connections.release(self._address)
            self._connections = None


class _Connections:
    """The connections this process holds, in all and per client address: the
    one count that ZEROLOCK_MAX_CONNECTIONS and ZEROLOCK_MAX_CONNECTIONS_PER_ADDRESS
    are held to. Only the event loop's thread touches it."""

    def __init__(self) -> None:
        self.held = 0
        self.per_address: dict[str, int] = {}

    def take(self, address: str | None) -> _Slot | bytes:
        """A slot for a new connection from ``address``, or the answer refusing it."""
        if self.held >= settings.ZEROLOCK_MAX_CONNECTIONS:
            return _server_busy(per_address=False)
        if address is not None:
            held_here = self.per_address.get(address, 0)
            if held_here >= settings.ZEROLOCK_MAX_CONNECTIONS_PER_ADDRESS:
                return _server_busy(per_address=True)
            self.per_address[address] = held_here + 1
        self.held += 1
        return _Slot(self, address)

    def release(self, address: str | None) -> None:
        self.held -= 1
        if address is not None:
            left = self.per_address[address] - 1
            if left:
                self.per_address[address] = left
            else:
                del self.per_address[address]  # the table holds only addresses connected now


_CONNECTIONS = _Connections()


def _server_busy(*, per_address: bool) -> bytes:
    from common.errors import server_busy_envelope  # Django is set up by now

    return closing_json(
        503,
        b"Service Unavailable",
        server_busy_envelope(per_address=per_address),
        {b"Retry-After": b"1"},
    )


class _GivesSlotBack(asyncio.Protocol):
    """Mixed into the WebSocket protocol uvicorn is configured with: it gives
    the connection's slot back once the socket it took over from HTTP is gone."""

    slot: _Slot | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            if self.slot is not None:
                self.slot.release()


_SLOT_HOLDING: dict[type[asyncio.Protocol], type[_GivesSlotBack]] = {}


def _slot_holding(websocket_protocol: type[asyncio.Protocol]) -> type[_GivesSlotBack]:
    made = _SLOT_HOLDING.get(websocket_protocol)
    if made is None:
        name = "SlotHolding" + websocket_protocol.__name__
        made = _SLOT_HOLDING[websocket_protocol] = type(
            name, (_GivesSlotBack, websocket_protocol), {}
        )
    return made
