"""WebSocket handshakes: who is connecting, with failures limited per address.

A failed handshake (missing, unknown, revoked or expired key) counts against the
client address (``ws-ip:ADDR``, the same sliding window as the REST limits). Past
``ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE`` the address is refused outright until
its window frees up: no key lookup, no audit entry each (one ``RATE_LIMITED``
entry marks the start of the block). The audit entries that are written go
through the batched write-behind path, outside the global write lock.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache import cache

from .auth import key_from_raw, split_raw_key
from .errors import ApiError
from .models import ApiKey
from .ratelimit import rate_limit_hit
from .services import audit_auth_failure


def client_address(scope: dict[str, Any]) -> str:
    client = scope.get("client") or ("", 0)
    return str(client[0] or "unknown")


def _blocked_key(address: str) -> str:
    return f"ws-blocked:{address}"


def handshake_key(*, scope: dict[str, Any], raw_key: str) -> ApiKey:
    """The usable key of this handshake, or ApiError: 401 for a bad key (counted
    and audited), 429 RATE_LIMITED for an address over its failure budget."""
    address = client_address(scope)
    if cache.get(_blocked_key(address)) is not None:
        raise ApiError(
            429, "RATE_LIMITED", "Too many failed handshakes from this address; retry later."
        )
    try:
        return key_from_raw(raw_key)
    except ApiError as failure:
        _failed(address=address, raw_key=raw_key, reason=failure.code, path=scope.get("path", ""))
        raise


def _failed(*, address: str, raw_key: str, reason: str, path: str) -> None:
    key_prefix = (split_raw_key(raw_key) or ("",))[0]
    state = rate_limit_hit(
        identity=f"ws-ip:{address}", limit=settings.ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE
    )
    if state.allowed:
        audit_auth_failure(reason=reason, key_prefix=key_prefix, path=path)
    elif cache.add(_blocked_key(address), 1, timeout=state.retry_after):
        # One entry for the whole block; the handshakes refused during it are not
        # audited one by one (that was the flood's cost).
        audit_auth_failure(reason="RATE_LIMITED", key_prefix=key_prefix, path=path)
