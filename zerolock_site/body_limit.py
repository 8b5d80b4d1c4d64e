"""The request body limit where the body arrives: in Daphne, before the app.

Daphne (Twisted) receives the whole body, spooling it to a temporary file, and
only then hands it to the application, queueing every chunk at once: a 300 MB
chunked body was read in full (and queued in memory) before the 401. Twisted's
``Request.handleContentChunk`` sees each piece as it arrives, so counting there
refuses a body the moment it passes ``ZEROLOCK_MAX_BODY_BYTES``, declared
(Content-Length) or not (chunked), and nothing past the limit is kept.

Installed once from ``zerolock_site/asgi.py``. This is Daphne's one place for
the rule (``common.errors.over_body_limit``), as the WSGI bridge is uvicorn's.
"""

from __future__ import annotations

from typing import Any

from common.errors import over_body_limit, too_large_envelope

from .raw_answers import closing_json


def _refuse(request: Any) -> None:
    """Answers 413 at once and closes: the rest of the body is never read."""
    request._zerolock_refused = True
    transport = request.channel.transport
    transport.write(closing_json(413, b"Payload Too Large", too_large_envelope()))
    transport.loseConnection()


def install_daphne_body_limit() -> None:
    from daphne.http_protocol import WebRequest

    if getattr(WebRequest, "_zerolock_body_limit", False):
        return
    original_got_length = WebRequest.gotLength
    original_chunk = WebRequest.handleContentChunk
    original_process = WebRequest.process

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

    WebRequest.gotLength = gotLength
    WebRequest.handleContentChunk = handleContentChunk
    WebRequest.process = process
    WebRequest._zerolock_body_limit = True
