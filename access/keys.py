"""Raw API keys: their shape, how they are made and how one is looked up.

A raw key is ``zl_<prefix>.<secret>``; only a SHA-256 of the secret is stored."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.core.cache import cache
from django.utils import timezone

from common.errors import ApiError

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


def key_from_raw(raw: str) -> ApiKey:
    """The usable key for a raw key string, or ApiError 401 saying why not."""
    parts = split_raw_key(raw)
    key = ApiKey.objects.filter(prefix=parts[0]).first() if parts else None
    if (
        parts is None
        or key is None
        or not secrets.compare_digest(key.hashed_key, hash_secret(parts[1]))
    ):
        raise ApiError(401, "UNAUTHENTICATED", "Unknown API key.")
    if key.revoked:
        raise ApiError(401, "KEY_REVOKED", "This API key has been revoked.")
    if key.expires_at and key.expires_at <= timezone.now():
        raise ApiError(401, "KEY_EXPIRED", "This API key has expired.")
    _touch(key)
    return key


def _touch(key: ApiKey) -> None:
    if cache.add(f"apikey-used:{key.pk}", 1, timeout=LAST_USED_RESOLUTION.total_seconds()):
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
