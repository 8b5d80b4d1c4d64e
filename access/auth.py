"""API-key authentication and per-view permission checks."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from access.models import ApiKey
from access.ratelimit import RateState, rate_limit_hit
from common.errors import ApiError

KEY_PREFIX = "zl_"
AGENT_ID_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")
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


def key_from_raw(raw: str) -> ApiKey:
    """The usable key for a raw key string, or ApiError 401 saying why not."""
    parts = split_raw_key(raw)
    key = ApiKey.objects.filter(prefix=parts[0]).first() if parts else None
    if key is None or not secrets.compare_digest(key.hashed_key, hash_secret(parts[1])):
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


@dataclass(frozen=True)
class Principal:
    """Who is acting: the key, and the agent id it acts as (may be empty on reads)."""

    key: ApiKey
    agent_id: str

    @property
    def is_authenticated(self) -> bool:
        return True


def key_rate_hit(key: ApiKey) -> RateState:
    """Counts one request against a valid key: its own limit, or the default."""
    return rate_limit_hit(
        identity=f"key:{key.prefix}",
        limit=key.rate_limit or settings.ZEROLOCK_RATE_LIMIT_PER_MINUTE,
    )


def request_key(request: HttpRequest) -> ApiKey | ApiError | None:
    """The request's X-API-Key, resolved once per request (the rate limiter needs
    it before DRF authenticates): the key, the ApiError saying why it is not
    usable, or None when no key was sent."""
    if not hasattr(request, "zerolock_key"):
        raw = request.META.get("HTTP_X_API_KEY", "")
        resolved: ApiKey | ApiError | None = None
        if raw:
            try:
                resolved = key_from_raw(raw)
            except ApiError as exc:
                resolved = exc
        request.zerolock_key = resolved
    return request.zerolock_key


def permission_check(key: ApiKey, permission: str) -> None:
    """403 PERMISSION_DENIED naming the permission the key lacks."""
    if not key.has_permission(permission):
        raise ApiError(
            403,
            "PERMISSION_DENIED",
            f"This key lacks the {permission!r} permission.",
            permission=permission,
        )


def shard_scope_check(principal: Principal, shard_id: str) -> None:
    if not principal.key.allows_shard(shard_id):
        raise ApiError(
            403,
            "PERMISSION_DENIED",
            f"This key may not touch shard {shard_id!r} (scopes: {principal.key.shard_prefixes}).",
            permission="shard scope",
        )


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Principal, ApiKey] | None:
        # Resolved, and counted against the key or the address, by RateLimitMiddleware.
        key = request_key(request._request)
        if key is None:
            raise ApiError(401, "UNAUTHENTICATED", "Send your API key in the X-API-Key header.")
        if isinstance(key, ApiError):
            from access.services import audit_auth_failure

            raw = request.META.get("HTTP_X_API_KEY", "")
            audit_auth_failure(reason=key.code, key_prefix=(split_raw_key(raw) or ("",))[0])
            raise key
        agent_id = request.META.get("HTTP_X_AGENT_ID", "").strip()
        if agent_id:
            if not AGENT_ID_RE.match(agent_id):
                raise ApiError(
                    400, "VALIDATION_ERROR", "X-Agent-Id: 1-128 chars of [A-Za-z0-9_.:@-]."
                )
            if not key.allows_agent(agent_id):
                raise ApiError(
                    403, "AGENT_NOT_ALLOWED", f"This key may not act as agent {agent_id!r}."
                )
        return Principal(key=key, agent_id=agent_id), key

    def authenticate_header(self, request: Request) -> str:
        return "X-API-Key"


class HasKeyPermission(BasePermission):
    """Views name what they need: ``required_permissions = {"GET": "shard:read", ...}``.
    Write methods also need an acting agent (X-Agent-Id)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request.user
        if not isinstance(principal, Principal):
            return False
        needed = getattr(view, "required_permissions", {}).get(request.method)
        if needed:
            permission_check(principal.key, needed)
        if request.method not in ("GET", "HEAD", "OPTIONS") and not principal.agent_id:
            raise ApiError(400, "AGENT_ID_REQUIRED", "Writes need the X-Agent-Id header.")
        if "shard_id" in view.kwargs:
            shard_scope_check(principal, view.kwargs["shard_id"])
        return True
