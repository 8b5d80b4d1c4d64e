"""The three patches Daphne needs to serve ZeroLock, installed only by its entry
point (zerolock_site/daphne_server.py); each replaces a name Daphne, Twisted or
autobahn keeps private. Everything of them is imported inside these functions,
so the default (uvicorn) process loads none of it
(tests/site/test_servers.py).

- *The body limit, where the body arrives.* Daphne (Twisted) receives the
  whole body, spooling it to a temporary file, and only then hands it to the
  application, queueing every chunk at once: a 300 MB chunked body was read in
  full (and queued in memory) before the 401. Twisted's
  ``Request.handleContentChunk`` sees each piece as it arrives, so counting
  there refuses a body the moment it passes ``ZEROLOCK_MAX_BODY_BYTES``,
  declared (``gotLength``) or not (chunked), and nothing past the limit is
  kept. This is Daphne's one place for the rule (``over_body_limit``), as the
  WSGI bridge is uvicorn's; the bridge under Daphne is handed nothing past it.
- *No form parsing.* Twisted's ``Request.requestReceived`` parses every POST's
  Content-Type with the ``email`` package and, for urlencoded or multipart
  bodies, the whole body into ``request.args``, on the reactor's thread (the
  event loop every request and socket shares). Daphne never reads ``args``: it
  hands the raw body to the application, which parses it again. The
  Content-Type parse alone was 6.5 % of the server's CPU per commit
  (bench/profile.py commit --gil), and one 1 MiB multipart body of 20,000
  parts held the loop 0.54 s. Telling Twisted that no body is a form skips
  both; query-string arguments are parsed as before.
- *Cheap debug lines.* autobahn's ``WebSocketProtocol._connectionMade`` builds
  ``pformat`` of some 40 config attributes, and ``startHandshake`` of the
  transport details, as arguments to ``log.debug`` calls that are then
  dropped. Measured (py-spy --gil on Daphne under 300 handshakes a second,
  bench/handshake_flood.py), that was 9 % of the server's CPU, paid by every
  socket, honest or not. ``repr`` gives the same information on one line.

tests/site/test_daphne.py fails if Twisted or autobahn stops reading a name
replaced here.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured

# Set on Daphne's request class once all three patches are in: the mark
# ``refuse_daphne_without_its_patches`` looks for.
PATCHED = "_zerolock_patched"


def install_patches() -> None:
    """Installs the three patches, once. Before anything imports Twisted's
    reactor: ``daphne.server`` installs the asyncio one when imported."""
    import daphne.server  # noqa: F401  (the reactor first)
    from autobahn.websocket import protocol
    from daphne.http_protocol import WebRequest
    from twisted.web import http

    if getattr(WebRequest, PATCHED, False):
        return
    _install_body_limit(WebRequest)
    http._parseContentType = _no_form
    protocol.pformat = repr  # type: ignore[assignment]
    setattr(WebRequest, PATCHED, True)


def refuse_daphne_without_its_patches() -> None:
    """Called by zerolock_site/asgi.py as it loads: Daphne's own command
    (``daphne zerolock_site.asgi:application``) would serve the application
    without its body limit. Looks only at what is loaded already, so a process
    Daphne does not run imports nothing of it."""
    if "daphne.cli" not in sys.modules:
        return
    request = getattr(sys.modules.get("daphne.http_protocol"), "WebRequest", None)
    if not getattr(request, PATCHED, False):
        raise ImproperlyConfigured(
            "Daphne serves ZeroLock only through `python -m zerolock_site.daphne_server` "
            "(ZEROLOCK_SERVER=daphne), which installs its body limit."
        )


def _install_body_limit(request_class: Any) -> None:
    from common.errors import over_body_limit

    original_got_length = request_class.gotLength
    original_chunk = request_class.handleContentChunk
    original_process = request_class.process

    def gotLength(self: Any, length: int | None) -> None:  # noqa: N802 (Twisted's name)
        self._zerolock_received = 0
        if length is not None and over_body_limit(length):
            original_got_length(self, 0)  # Twisted expects a content file to exist
            _refuse(self)
            return
        original_got_length(self, length)

    def handleContentChunk(self: Any, data: bytes) -> None:  # noqa: N802
        if getattr(self, "_zerolock_refused", False):
            return
        self._zerolock_received = getattr(self, "_zerolock_received", 0) + len(data)
        if over_body_limit(self._zerolock_received):
            _refuse(self)
            return
        original_chunk(self, data)

    def process(self: Any) -> Any:
        if getattr(self, "_zerolock_refused", False):
            return None
        return original_process(self)

    request_class.gotLength = gotLength
    request_class.handleContentChunk = handleContentChunk
    request_class.process = process


def _refuse(request: Any) -> None:
    """Answers 413 at once and closes: the rest of the body is never read."""
    from common.errors import too_large_envelope

    from .raw_answers import closing_json

    request._zerolock_refused = True
    transport = request.channel.transport
    transport.write(closing_json(413, b"Payload Too Large", too_large_envelope()))
    transport.loseConnection()


def _no_form(line: bytes) -> bytes:
    return b""
