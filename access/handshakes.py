"""WebSocket handshakes: who is connecting, with failures limited per address.

A failed handshake (missing, unknown, revoked or expired key) counts against the
client address (``ws-ip:ADDR``, the same sliding window as the REST limits). Past
``ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE`` the address is refused outright until
its window frees up: no key lookup, no audit entry each (one ``RATE_LIMITED``
entry marks the start of the block). The audit entries that are written go
through the batched write-behind path, outside the global write lock.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.cache import cache

from common.errors import ApiError, ErrorCode

from .auth import authentication_refused, key_resolve
from .keys import split_raw_key
from .models import ApiKey
from .ratelimit import rate_limit_hit


def client_address(scope: dict[str, Any]) -> str:
    client = scope.get("client") or ("", 0)
    return str(client[0] or "unknown")


def _blocked_key(address: str) -> str:
    return f"ws-blocked:{address}"


# This process's copy of the blocks: checked in the event loop, with no thread hop
# or cache round trip, so a refused handshake costs next to nothing.
_blocked_here: dict[str, float] = {}
LOCAL_BLOCK_SECONDS = 1.0


def handshake_blocked(scope: dict[str, Any]) -> bool:
    """Cheap first check, before anything else runs for a handshake: a blocked
    address whose handshake carries no well-formed key is refused on the spot."""
    until = _blocked_here.get(client_address(scope))
    if until is None:
        return False
    if until > time.monotonic():
        return True
    _blocked_here.pop(client_address(scope), None)
    return False


def _block_here(address: str, seconds: float) -> None:
    if len(_blocked_here) > 10_000:  # many addresses: forget the expired ones
        now = time.monotonic()
        for stale in [a for a, until in _blocked_here.items() if until <= now]:
            del _blocked_here[stale]
    _blocked_here[address] = time.monotonic() + seconds


def handshake_key(*, scope: dict[str, Any], raw_key: str) -> ApiKey:
    """The usable key of this handshake, or ApiError: 401 for a bad key (counted
    and audited), 429 RATE_LIMITED for a bad key from an address over its failure
    budget (neither counted nor audited). A valid key is let through even then:
    honest agents may share an address with whoever is flooding it."""
    address = client_address(scope)
    blocked = handshake_blocked(scope)
    if not blocked and cache.get(_blocked_key(address)) is not None:
        # Blocked by this or another process: re-checked at most once a second here.
        _block_here(address, LOCAL_BLOCK_SECONDS)
        blocked = True
    if blocked:
        key = key_resolve(raw_key) if split_raw_key(raw_key) is not None else None
        if not isinstance(key, ApiKey):
            raise throttled()
        return key
    key = key_resolve(raw_key)
    if isinstance(key, ApiError):
        raise _failed(address=address, raw_key=raw_key, refusal=key, path=scope.get("path", ""))
    return key


def throttled() -> ApiError:
    return ApiError(
        ErrorCode.RATE_LIMITED, "Too many failed handshakes from this address; retry later."
    )


def _failed(*, address: str, raw_key: str, refusal: ApiError, path: str) -> ApiError:
    """Counts a failed handshake against its address; records it while the
    address is within its budget, and once more when the budget runs out."""
    state = rate_limit_hit(
        identity=f"ws-ip:{address}", limit=settings.ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE
    )
    if state.allowed:
        return authentication_refused(refusal, raw=raw_key, path=path)
    _block_here(address, min(state.retry_after or 1, LOCAL_BLOCK_SECONDS))
    if cache.add(_blocked_key(address), 1, timeout=state.retry_after):
        # One entry for the whole block; the handshakes refused during it are not
        # audited one by one (that was the flood's cost).
        authentication_refused(throttled(), raw=raw_key, path=path)
    return refusal
