"""The one error envelope: ``{"error": {"code", "message", ...details}}``.

Every failure under ``/api/`` leaves in this shape. This module is the domain
part (the errors and their envelopes, nothing of DRF or Django views); the
wiring that turns DRF exceptions and Django's own answers into it lives at the
top, in zerolock_site/http_errors.py. A body past the limit never reaches
Django: the web server refuses it (``over_body_limit``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from django.conf import settings


class ErrorCode(StrEnum):
    """Every code the server sends, in an envelope or a WebSocket error frame
    (docs/api.md, "Every error code"; tests/common/test_error_catalogue.py
    holds the two to each other). A ``str``: ``code == "STALE_VERSION"`` holds
    and the JSON is the name."""

    AGENT_ID_REQUIRED = "AGENT_ID_REQUIRED"
    AGENT_NOT_ALLOWED = "AGENT_NOT_ALLOWED"
    ALREADY_DECIDED = "ALREADY_DECIDED"
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"
    APPROVAL_INVALID = "APPROVAL_INVALID"
    APPROVAL_NOT_FOUND = "APPROVAL_NOT_FOUND"
    APPROVAL_POLICY_NOT_FOUND = "APPROVAL_POLICY_NOT_FOUND"
    APPROVAL_NOT_PENDING = "APPROVAL_NOT_PENDING"
    APPROVAL_VALUE_CHANGED = "APPROVAL_VALUE_CHANGED"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    BAD_REQUEST = "BAD_REQUEST"
    COMPACTED = "COMPACTED"
    ERROR = "ERROR"
    FENCED = "FENCED"
    HEADERS_TOO_LARGE = "HEADERS_TOO_LARGE"
    IDEMPOTENCY_ANSWER_LOST = "IDEMPOTENCY_ANSWER_LOST"
    IDEMPOTENCY_IN_PROGRESS = "IDEMPOTENCY_IN_PROGRESS"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    KEY_EXPIRED = "KEY_EXPIRED"
    KEY_REVOKED = "KEY_REVOKED"
    LEASE_NOT_FOUND = "LEASE_NOT_FOUND"
    MALFORMED_JSON = "MALFORMED_JSON"
    MALFORMED_UPDATE = "MALFORMED_UPDATE"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    NOT_ACCEPTABLE = "NOT_ACCEPTABLE"
    NOT_ADDITIVE = "NOT_ADDITIVE"
    NOT_AN_OWNER = "NOT_AN_OWNER"
    NOT_FOUND = "NOT_FOUND"
    NOTHING_TO_CLAIM = "NOTHING_TO_CLAIM"
    NO_SESSION = "NO_SESSION"
    PATH_CONFLICT = "PATH_CONFLICT"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RATE_LIMITED = "RATE_LIMITED"
    READ_SET_STALE = "READ_SET_STALE"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
    RESERVATION_CONFLICT = "RESERVATION_CONFLICT"
    RESERVATION_NOT_FOUND = "RESERVATION_NOT_FOUND"
    RESERVATION_TOO_COSTLY = "RESERVATION_TOO_COSTLY"
    SCHEMA_TOO_COSTLY = "SCHEMA_TOO_COSTLY"
    SCHEMA_VIOLATION = "SCHEMA_VIOLATION"
    SELF_APPROVAL = "SELF_APPROVAL"
    SERVER_BUSY = "SERVER_BUSY"
    SHARD_EXISTS = "SHARD_EXISTS"
    SHARD_NOT_FOUND = "SHARD_NOT_FOUND"
    SHARD_TOO_LARGE = "SHARD_TOO_LARGE"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    STALE_VERSION = "STALE_VERSION"
    TOO_MANY_SUBSCRIPTIONS = "TOO_MANY_SUBSCRIPTIONS"
    TOO_MANY_IN_FLIGHT = "TOO_MANY_IN_FLIGHT"
    TOO_MANY_POLICIES = "TOO_MANY_POLICIES"
    TOO_MANY_RESERVATIONS = "TOO_MANY_RESERVATIONS"
    TOO_MANY_WATCHES = "TOO_MANY_WATCHES"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    UNSUPPORTED_DIFF = "UNSUPPORTED_DIFF"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    UNSUPPORTED_MESSAGE = "UNSUPPORTED_MESSAGE"
    UNSUPPORTED_UPDATE = "UNSUPPORTED_UPDATE"
    VALIDATION_ERROR = "VALIDATION_ERROR"

    @property
    def status(self) -> int:
        """The one HTTP status this code is sent with. ``ERROR`` has none: it
        stands for a refusal with no more specific code and keeps that refusal's
        status (DRF's or Django's), so nothing raises it as an ApiError."""
        try:
            return _STATUSES[self]
        except KeyError:
            raise ValueError(f"{self} has no status of its own") from None


_STATUSES: dict[ErrorCode, int] = {
    ErrorCode.AGENT_ID_REQUIRED: 400,
    ErrorCode.AGENT_NOT_ALLOWED: 403,
    ErrorCode.ALREADY_DECIDED: 409,
    ErrorCode.APPROVAL_EXPIRED: 409,
    ErrorCode.APPROVAL_INVALID: 403,
    ErrorCode.APPROVAL_NOT_FOUND: 404,
    ErrorCode.APPROVAL_POLICY_NOT_FOUND: 404,
    ErrorCode.APPROVAL_NOT_PENDING: 409,
    ErrorCode.APPROVAL_VALUE_CHANGED: 409,
    ErrorCode.APPROVAL_REQUIRED: 403,
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.COMPACTED: 410,
    ErrorCode.FENCED: 409,
    ErrorCode.HEADERS_TOO_LARGE: 431,
    ErrorCode.IDEMPOTENCY_ANSWER_LOST: 409,
    ErrorCode.IDEMPOTENCY_IN_PROGRESS: 409,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: 422,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.KEY_EXPIRED: 401,
    ErrorCode.KEY_REVOKED: 401,
    ErrorCode.LEASE_NOT_FOUND: 404,
    ErrorCode.MALFORMED_JSON: 400,
    ErrorCode.MALFORMED_UPDATE: 400,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.NOT_ACCEPTABLE: 406,
    ErrorCode.NOT_ADDITIVE: 400,
    ErrorCode.NOT_AN_OWNER: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.NOTHING_TO_CLAIM: 404,
    ErrorCode.PATH_CONFLICT: 400,
    ErrorCode.NO_SESSION: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.READ_SET_STALE: 409,
    ErrorCode.REQUEST_TIMEOUT: 408,
    ErrorCode.RESERVATION_CONFLICT: 409,
    ErrorCode.RESERVATION_NOT_FOUND: 404,
    ErrorCode.RESERVATION_TOO_COSTLY: 400,
    ErrorCode.SCHEMA_TOO_COSTLY: 400,
    ErrorCode.SCHEMA_VIOLATION: 400,
    ErrorCode.SELF_APPROVAL: 403,
    ErrorCode.SERVER_BUSY: 503,
    ErrorCode.SHARD_EXISTS: 409,
    ErrorCode.SHARD_NOT_FOUND: 404,
    ErrorCode.SHARD_TOO_LARGE: 413,
    ErrorCode.SHUTTING_DOWN: 503,
    ErrorCode.STALE_VERSION: 409,
    ErrorCode.TOO_MANY_SUBSCRIPTIONS: 400,
    ErrorCode.TOO_MANY_IN_FLIGHT: 429,
    ErrorCode.TOO_MANY_POLICIES: 409,
    ErrorCode.TOO_MANY_RESERVATIONS: 409,
    ErrorCode.TOO_MANY_WATCHES: 429,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.UNSUPPORTED_DIFF: 400,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.UNSUPPORTED_MESSAGE: 400,
    ErrorCode.UNSUPPORTED_UPDATE: 400,
    ErrorCode.VALIDATION_ERROR: 400,
}


class ApiError(Exception):
    """A domain error: its contract code (which fixes the HTTP status), message
    and extra details."""

    def __init__(self, code: ErrorCode, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = code.status
        self.code = code
        self.message = message
        self.details = details

    def envelope(self) -> dict[str, Any]:
        return envelope(self.code, self.message, **self.details)


# --- the repeated refusals: one class, one message ---------------------------------


class Invalid(ApiError):
    """400 VALIDATION_ERROR: a field, parameter or header out of its rules."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(ErrorCode.VALIDATION_ERROR, message, **details)


class MalformedUpdate(ApiError):
    """400 MALFORMED_UPDATE: not a readable Yjs message."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.MALFORMED_UPDATE, message)


class UnsupportedDiff(ApiError):
    """400 UNSUPPORTED_DIFF: an operation that does not fit the shard."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(ErrorCode.UNSUPPORTED_DIFF, message, **details)


class Unauthenticated(ApiError):
    """401 UNAUTHENTICATED: no API key, or (``unknown_key``) one that names no key."""

    def __init__(self, *, unknown_key: bool = False) -> None:
        message = (
            "Unknown API key." if unknown_key else "Send your API key in the X-API-Key header."
        )
        super().__init__(ErrorCode.UNAUTHENTICATED, message)


class KeyRevoked(ApiError):
    """401 KEY_REVOKED. A stream that finds its key unusable mid-way cannot tell
    revoked from expired, so it says both (``or_expired``)."""

    def __init__(self, *, or_expired: bool = False) -> None:
        message = "This API key has been revoked" + (" or has expired." if or_expired else ".")
        super().__init__(ErrorCode.KEY_REVOKED, message)


class KeyExpired(ApiError):
    """401 KEY_EXPIRED."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.KEY_EXPIRED, "This API key has expired.")


class PermissionDenied(ApiError):
    """403 PERMISSION_DENIED: the key lacks ``permission`` (``message`` when the
    plain sentence would not say how to get it)."""

    def __init__(self, permission: str, message: str = "", **details: Any) -> None:
        message = message or f"This key lacks the {permission!r} permission."
        super().__init__(ErrorCode.PERMISSION_DENIED, message, permission=permission, **details)


class OutOfScope(PermissionDenied):
    """403 PERMISSION_DENIED: shards outside the key's scopes (its shard prefixes)."""

    def __init__(self, shard_ids: list[str], scopes: object) -> None:
        shown = ", ".join(map(repr, shard_ids[:10]))
        super().__init__(
            "shard scope",
            f"This key may not touch {shown} (scopes: {scopes}).",
            shard_ids=shard_ids,
        )


class StaleVersion(ApiError):
    """409 STALE_VERSION: ``expected_version`` is not current; the details say what is."""

    def __init__(self, expected_version: int, current_version: int, **values: Any) -> None:
        super().__init__(
            ErrorCode.STALE_VERSION,
            f"Version {expected_version} is not current (current is {current_version}).",
            expected_version=expected_version,
            current_version=current_version,
            **values,
        )


class ShardNotFound(ApiError):
    """404 SHARD_NOT_FOUND, the same everywhere a shard id names nothing."""

    def __init__(self, shard_id: str, *, where: str = "", **details: Any) -> None:
        message = f"{where}: no shard {shard_id!r}." if where else f"No shard {shard_id!r}."
        if where:
            details["at"] = where
        super().__init__(ErrorCode.SHARD_NOT_FOUND, message, shard_id=shard_id, **details)


class LeaseNotFound(ApiError):
    """404 LEASE_NOT_FOUND: no live lease with this id."""

    def __init__(self, lease_id: str) -> None:
        super().__init__(
            ErrorCode.LEASE_NOT_FOUND, f"No live lease {lease_id!r}.", lease_id=lease_id
        )


class ApprovalInvalid(ApiError):
    """403 APPROVAL_INVALID: a commit's approval does not fit it (``reason``)."""

    def __init__(self, reason: str, message: str, **details: Any) -> None:
        super().__init__(ErrorCode.APPROVAL_INVALID, message, reason=reason, **details)


class PayloadTooLarge(ApiError):
    """413 PAYLOAD_TOO_LARGE: a request body, or one WebSocket message, over
    ZEROLOCK_MAX_BODY_BYTES."""

    def __init__(self, what: str = "Request body") -> None:
        limit = settings.ZEROLOCK_MAX_BODY_BYTES
        super().__init__(
            ErrorCode.PAYLOAD_TOO_LARGE, f"{what} exceeds {limit} bytes.", limit_bytes=limit
        )


class RateLimited(ApiError):
    """429 RATE_LIMITED: over ``limit`` requests a minute; ``retry_after`` seconds
    is also the Retry-After header."""

    def __init__(self, *, limit: int, who: str, retry_after: int | None) -> None:
        super().__init__(
            ErrorCode.RATE_LIMITED,
            f"Rate limit of {limit} requests per minute exceeded for {who}; "
            f"retry in {retry_after} s.",
            retry_after=retry_after,
        )


def envelope(code: ErrorCode, message: str, **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **details}}


def internal_error() -> ApiError:
    """What any unexpected failure under /api/ answers: no traceback, no detail."""
    return ApiError(ErrorCode.INTERNAL_ERROR, "Internal server error.")


def over_body_limit(size: int) -> bool:
    """The body rule: a request body, or one WebSocket message, of ``size``
    bytes is past ZEROLOCK_MAX_BODY_BYTES (refused with ``PayloadTooLarge``).

    Each web server calls it where the body arrives, and nowhere else: uvicorn
    in the WSGI bridge (zerolock_site/wsgi_bridge.py), Daphne in Twisted's
    request (zerolock_site/daphne_patches.py); the WebSocket consumers for each
    message (realtime.consumers.message_size_check)."""
    return size > settings.ZEROLOCK_MAX_BODY_BYTES


def too_large_envelope() -> dict[str, Any]:
    return PayloadTooLarge().envelope()


def headers_too_large_envelope() -> dict[str, Any]:
    limit = settings.ZEROLOCK_MAX_HEAD_BYTES
    return envelope(
        ErrorCode.HEADERS_TOO_LARGE,
        f"The request line and headers exceed {limit} bytes.",
        limit_bytes=limit,
    )


def request_timeout_envelope() -> dict[str, Any]:
    timeout = settings.ZEROLOCK_HEAD_TIMEOUT_SECONDS
    return envelope(
        ErrorCode.REQUEST_TIMEOUT,
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
    return envelope(ErrorCode.SERVER_BUSY, f"{message} Retry shortly.", limit=limit, retry_after=1)
