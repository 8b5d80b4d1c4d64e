"""The one error envelope: ``{"error": {"code", "message", ...details}}``.

Every failure under ``/api/`` leaves in this shape. This module is the domain
part (the errors and their envelopes, nothing of DRF or Django views); the
wiring that turns DRF exceptions and Django's own answers into it lives at the
top, in zerolock_site/http_errors.py. A body past the limit never reaches
Django: the web server refuses it (``over_body_limit``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings


class ApiError(Exception):
    """A domain error with its HTTP status, contract code and extra details."""

    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    def envelope(self) -> dict[str, Any]:
        return envelope(self.code, self.message, **self.details)


def envelope(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **details}}


def internal_error() -> ApiError:
    """What any unexpected failure under /api/ answers: no traceback, no detail."""
    return ApiError(500, "INTERNAL_ERROR", "Internal server error.")


def over_body_limit(size: int) -> bool:
    """The body rule: a request body, or one WebSocket message, of ``size``
    bytes is past ZEROLOCK_MAX_BODY_BYTES (refused with ``payload_too_large``).

    Each web server calls it where the body arrives, and nowhere else: uvicorn
    in the WSGI bridge (zerolock_site/wsgi_bridge.py), Daphne in Twisted's
    request (zerolock_site/daphne_patches.py); the WebSocket consumers for each
    message (realtime.consumers.message_size_check)."""
    return size > settings.ZEROLOCK_MAX_BODY_BYTES


def payload_too_large(what: str = "Request body") -> ApiError:
    """A request body, or one WebSocket message, over ZEROLOCK_MAX_BODY_BYTES."""
    limit = settings.ZEROLOCK_MAX_BODY_BYTES
    return ApiError(413, "PAYLOAD_TOO_LARGE", f"{what} exceeds {limit} bytes.", limit_bytes=limit)


def too_large_envelope() -> dict[str, Any]:
    return payload_too_large().envelope()


def headers_too_large_envelope() -> dict[str, Any]:
    limit = settings.ZEROLOCK_MAX_HEAD_BYTES
    return envelope(
        "HEADERS_TOO_LARGE",
        f"The request line and headers exceed {limit} bytes.",
        limit_bytes=limit,
    )


def request_timeout_envelope() -> dict[str, Any]:
    timeout = settings.ZEROLOCK_HEAD_TIMEOUT_SECONDS
    return envelope(
        "REQUEST_TIMEOUT",
        f"The request line and headers did not arrive within {timeout:g} s.",
        timeout_seconds=timeout,
    )


def server_busy_envelope(*, per_address: bool) -> dict[str, Any]:
    if per_address:
        limit = settings.ZEROLOCK_MAX_CONNECTIONS_PER_ADDRESS
        message = f"This address already holds {limit} connections to this server process."
    else:
        limit = settings.ZEROLOCK_MAX_CONNECTIONS
        message = f"This server process already holds {limit} connections."
    return envelope("SERVER_BUSY", f"{message} Retry shortly.", limit=limit, retry_after=1)
