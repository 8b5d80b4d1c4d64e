"""Raw API keys: their shape, how they are made and how one is looked up.

A raw key is ``zl_<prefix>.<secret>``; only a SHA-256 of the secret is stored."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from common.errors import KeyExpired, KeyRevoked, Unauthenticated
from common.hotsql import instance_where

from .models import ApiKey

KEY_PREFIX = "zl_"
# last_used_at is a hint for admins, not worth a write on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_secret(secret: str) -> str:
    # The secret is 256 random bits: a fast hash is enough, a slow KDF buys nothing.
    return hashlib.sha256(secret.encode()).hexdigest()


def generate_raw_key() -> tuple[str, str, str]:
    """Returns (raw_key, prefix, hashed_secret)."""
    prefix = secrets.token_hex(4)
    secret = secrets.token_urlsafe(32)
    return f"{KEY_PREFIX}{prefix}.{secret}", prefix, hash_secret(secret)


def split_raw_key(raw: str) -> tuple[str, str] | None:
    if not raw.startswith(KEY_PREFIX) or "." not in raw:
        return None
    prefix, _, secret = raw[len(KEY_PREFIX) :].partition(".")
    return (prefix, secret) if prefix and secret else None


def prefix_of(raw: str) -> str:
    """The prefix a raw key claims ("" when it is not shaped like a key)."""
    return (split_raw_key(raw) or ("",))[0]


class KeyCache:
    """Keys by prefix, each held for at most ZEROLOCK_KEY_CACHE_SECONDS (0.5 s by
    default) in this process, so a busy agent's requests do not each pay a key
    query, while a key revoked or changed anywhere (another process, the admin,
    SQL) is refused by every process within that time. Saves in this process
    drop the entry at once. Unknown prefixes are never held: a flood of made-up
    keys must not grow this map (the address rate limit meets those)."""

    def __init__(self) -> None:
        self._keys: dict[str, tuple[float, ApiKey]] = {}
        self._lock = threading.Lock()

    def get(self, prefix: str) -> ApiKey | None:
        ttl = settings.ZEROLOCK_KEY_CACHE_SECONDS
        held = self._keys.get(prefix)
        now = time.monotonic()
        if held is not None and now - held[0] < ttl:
            return held[1]
        # A compiled statement (common.hotsql): every unknown key of a flood and
        # every cache miss pays this, and the ORM's query building was most of it.
        key = instance_where(ApiKey, prefix=prefix)
        with self._lock:
            if key is None or ttl <= 0:
                self._keys.pop(prefix, None)
            else:
                self._keys[prefix] = (now, key)
        return key

    def forget(self, prefix: str) -> None:
        with self._lock:
            self._keys.pop(prefix, None)

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()


key_cache = KeyCache()


def key_from_raw(raw: str) -> ApiKey:
    """The usable key for a raw key string, or ApiError 401 saying why not."""
    parts = split_raw_key(raw)
    key = key_cache.get(parts[0]) if parts else None
    if (
        parts is None
        or key is None
        or not secrets.compare_digest(key.hashed_key, hash_secret(parts[1]))
    ):
        raise Unauthenticated(unknown_key=True)
    if key.revoked:
        raise KeyRevoked()
    if key.expires_at and key.expires_at <= timezone.now():
        raise KeyExpired()
    _touch(key)
    return key


_touched: dict[int, float] = {}


def _touch(key: ApiKey) -> None:
    """At most one last_used_at write per key per minute per process; the check is
    a dict lookup, not a cache round trip (Redis) on every request."""
    now = time.monotonic()
    if now - _touched.get(key.pk, -LAST_USED_RESOLUTION.total_seconds()) < (
        LAST_USED_RESOLUTION.total_seconds()
    ):
        return
    _touched[key.pk] = now
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
