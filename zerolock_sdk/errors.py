"""One exception per error code of the contract, all under ``ZeroLockError``."""

from __future__ import annotations

from typing import Any


class ZeroLockError(Exception):
    """An error answer from the server: ``code``, ``message``, HTTP ``status``
    and whatever details the error envelope carried."""

    def __init__(self, code: str, message: str, status: int, details: dict[str, Any] | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.details = details or {}


class StaleCommitError(ZeroLockError):
    """409 STALE_VERSION: someone committed first. Carries what won."""

    @property
    def current_version(self) -> int | None:
        return self.details.get("current_version")

    @property
    def current_value(self) -> Any:
        return self.details.get("current_value")


class ReadSetStaleError(ZeroLockError):
    """409 READ_SET_STALE: a shard this decision was based on moved on."""

    @property
    def stale(self) -> list[dict[str, Any]]:
        return self.details.get("stale", [])


class IrreversibleShardError(ZeroLockError):
    """403 APPROVAL_REQUIRED: the shard is irreversible; request an approval."""


class ApprovalInvalidError(ZeroLockError):
    """403 APPROVAL_INVALID; ``reason`` says why (WRONG_SHARD, EXPIRED, ...)."""

    @property
    def reason(self) -> str | None:
        return self.details.get("reason")


class SchemaViolationError(ZeroLockError):
    """400 SCHEMA_VIOLATION: the value does not match the shard's schema."""


class ValidationError(ZeroLockError):
    """400 VALIDATION_ERROR, UNSUPPORTED_DIFF, MALFORMED_JSON and other bad input."""


class PermissionDeniedError(ZeroLockError):
    """403: the key may not do this (PERMISSION_DENIED, AGENT_NOT_ALLOWED, ...)."""


class SelfApprovalError(PermissionDeniedError):
    """403 SELF_APPROVAL."""


class AuthenticationError(ZeroLockError):
    """401: no key, an unknown, revoked or expired key."""


class MissingApiKeyError(AuthenticationError):
    """No key was passed and ``$ZEROLOCK_API_KEY`` is not set. Raised by the
    client before anything is sent (``status`` 0: the server never saw it)."""

    MESSAGE = (
        "No ZeroLock API key. Set one in the environment (export ZEROLOCK_API_KEY=zl_...) "
        "or pass api_key=... to the client. The first `make run` prints an admin key; "
        "make more with `python manage.py createapikey NAME --permissions "
        "shard:read,shard:write,shard:create`."
    )

    def __init__(self) -> None:
        super().__init__("NO_API_KEY", self.MESSAGE, 0)


class NotFoundError(ZeroLockError):
    """404: no such shard, approval, lease, reservation or path."""


class ConflictError(ZeroLockError):
    """Other 409s: APPROVAL_NOT_PENDING, APPROVAL_EXPIRED, SHARD_EXISTS, FENCED, ..."""


class FencedError(ConflictError):
    """409 FENCED: a newer lease holder has written this shard."""


class ReservationConflictError(ConflictError):
    """409 RESERVATION_CONFLICT: a pattern overlaps another agent's reservation
    (one of the two exclusive). ``conflicts`` lists each reservation in the way,
    with the server's fields plus ``pattern`` (yours), ``overlaps`` (theirs) and
    ``example_path`` (a path both match), so the caller can say whom to ask."""

    @property
    def conflicts(self) -> list[dict[str, Any]]:
        return self.details.get("conflicts", [])


class RateLimitedError(ZeroLockError):
    """429: slow down; ``retry_after`` seconds (the client retries these itself)."""

    def __init__(self, *args: Any, retry_after: float = 1.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after


_BY_CODE: dict[str, type[ZeroLockError]] = {
    "STALE_VERSION": StaleCommitError,
    "READ_SET_STALE": ReadSetStaleError,
    "APPROVAL_REQUIRED": IrreversibleShardError,
    "APPROVAL_INVALID": ApprovalInvalidError,
    "SCHEMA_VIOLATION": SchemaViolationError,
    "SELF_APPROVAL": SelfApprovalError,
    "FENCED": FencedError,
    "RESERVATION_CONFLICT": ReservationConflictError,
    # Its status says as much; named so the mapping does not hang on the status alone.
    "RESERVATION_NOT_FOUND": NotFoundError,
    "RATE_LIMITED": RateLimitedError,
}
_BY_STATUS: dict[int, type[ZeroLockError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: ValidationError,
    429: RateLimitedError,
}


def error_from(status: int, body: Any, retry_after: str | None = None) -> ZeroLockError:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ZeroLockError("HTTP_ERROR", f"HTTP {status}", status)
    code = str(error.get("code", "HTTP_ERROR"))
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status, ZeroLockError)
    message = str(error.get("message", ""))
    if cls is RateLimitedError:
        return RateLimitedError(code, message, status, details, retry_after=float(retry_after or 1))
    return cls(code, message, status, details)
