"""Who is acting, and what they may do: API-key authentication, the agent check,
permission and scope checks. Each rule is one function, called by the REST
views, the WebSockets, the SSE watch and the services alike."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from common.errors import (
    ApiError,
    ErrorCode,
    Invalid,
    KeyRevoked,
    OutOfScope,
    PermissionDenied,
    Unauthenticated,
)
from common.ids import AGENT_ID_HELP, is_agent_id

# Who acts lives in access.identity (free of DRF); the names stay importable from
# here, where requests are authenticated into them.
from .identity import Actor as Actor
from .identity import Principal as Principal
from .identity import sees_values as sees_values
from .keys import key_from_raw, prefix_of
from .models import ApiKey
from .ratelimit import RateState, rate_limit_hit, rate_limited_error
from .services import audit_auth_failure


def principal(request: Request) -> Principal:
    """The principal DRF authenticated (every API view but /api/health has one)."""
    user = request.user
    if not isinstance(user, Principal):
        raise Unauthenticated()
    return user


# --- authentication ---------------------------------------------------------------


def key_resolve(raw: str) -> ApiKey | ApiError:
    """The usable key for a raw key, or the ApiError saying why not (nothing recorded)."""
    try:
        return key_from_raw(raw)
    except ApiError as refusal:
        return refusal


def key_invalid_error() -> ApiError:
    """What an open socket or stream is told when its key stopped being usable."""
    return KeyRevoked(or_expired=True)


def key_current(prefix: str) -> ApiKey:
    """The key an open socket was authenticated with, as it is now: usable
    (``ApiKey.objects.usable``: not revoked, not expired), or ``key_invalid_error``."""
    key = ApiKey.objects.usable().filter(prefix=prefix).first()
    if key is None:
        raise key_invalid_error()
    return key


def authentication_refused(refusal: ApiError, *, raw: str, path: str = "") -> ApiError:
    """The one record of a failed authentication (written behind, in batches)."""
    audit_auth_failure(reason=refusal.code, key_prefix=prefix_of(raw), path=path)
    return refusal


def authenticate(raw: str, *, path: str = "") -> ApiKey:
    """The one raw-key authentication: the usable key, or ApiError 401 once its
    failure is recorded."""
    key = key_resolve(raw)
    if isinstance(key, ApiError):
        raise authentication_refused(key, raw=raw, path=path)
    return key


def request_address(request: HttpRequest) -> str | None:
    """The client address every per-address limit counts against (the API's rate
    limits, the login throttle): the socket's peer, REMOTE_ADDR. No proxy header
    is trusted, since any client can send one."""
    return request.META.get("REMOTE_ADDR") or None


def request_key(request: HttpRequest) -> ApiKey | ApiError | None:
    """The request's X-API-Key, resolved once per request (the rate limiter needs
    it before DRF authenticates): the key, the ApiError saying why it is not
    usable, or None when no key was sent."""
    if not hasattr(request, "zerolock_key"):
        raw = request.META.get("HTTP_X_API_KEY", "")
        request.zerolock_key = key_resolve(raw) if raw else None  # type: ignore[attr-defined]
    return request.zerolock_key  # type: ignore[attr-defined]


def request_agent_id(request: HttpRequest) -> str:
    """The agent id a request claims in X-Agent-Id (checked by ``agent_check``)."""
    return request.META.get("HTTP_X_AGENT_ID", "").strip()


def request_principal(request: HttpRequest) -> Principal | None:
    """Who a request is, for what runs before DRF (the Idempotency-Key records):
    its usable key and an agent id that key may act as, or None when DRF's
    authentication will refuse the request (and say why)."""
    key = request_key(request)
    if not isinstance(key, ApiKey):
        return None
    try:
        agent_id = agent_check(key, request_agent_id(request))
    except ApiError:
        return None
    return Principal(key=key, agent_id=agent_id)


def address_rate_hit(address: str | None) -> RateState:
    """Counts one request that has no usable key against the client address."""
    return rate_limit_hit(
        identity=f"ip:{address or ''}",
        limit=settings.ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE,
    )


def key_admit(raw: str, *, address: str | None, path: str) -> ApiKey:
    """For an entry point that must know the key before it hands calls to the API
    (/mcp answers 401 before any JSON-RPC): the usable key, or the ApiError the API
    itself would answer. A missing or unusable key counts against the address and
    is recorded, as in the API; a usable one is counted by each API call it makes."""
    if not raw:
        refusal: ApiError = Unauthenticated()
    else:
        key = key_resolve(raw)
        if isinstance(key, ApiKey):
            return key
        refusal = key
    state = address_rate_hit(address)
    if not state.allowed:
        raise rate_limited_error(state, "this address")
    if raw:
        raise authentication_refused(refusal, raw=raw, path=path)
    raise refusal


def key_rate_hit(key: ApiKey) -> RateState:
    """Counts one request against a valid key: its own limit, or the default."""
    return rate_limit_hit(
        identity=f"key:{key.prefix}",
        limit=key.rate_limit or settings.ZEROLOCK_RATE_LIMIT_PER_MINUTE,
    )


# --- what a key may do ---------------------------------------------------------------


def agent_check(key: ApiKey, agent_id: str) -> str:
    """The agent id a request claims: well formed, and one this key may act as.
    An empty id passes (reads need none; writes check ``agent_required``)."""
    if not agent_id:
        return agent_id
    if not is_agent_id(agent_id):
        raise Invalid(f"Agent id: {AGENT_ID_HELP}.")
    if not key.allows_agent(agent_id):
        raise ApiError(ErrorCode.AGENT_NOT_ALLOWED, f"This key may not act as agent {agent_id!r}.")
    return agent_id


def agent_required(agent_id: str) -> None:
    if not agent_id:
        raise ApiError(
            ErrorCode.AGENT_ID_REQUIRED, "Writes need an agent id (X-Agent-Id, or ?agent_id=)."
        )


def permission_check(key: ApiKey, permission: str) -> None:
    """403 PERMISSION_DENIED naming the permission the key lacks."""
    if not key.has_permission(permission):
        raise PermissionDenied(permission)


def scope_check(key: ApiKey, shard_ids: Iterable[str]) -> None:
    """403 PERMISSION_DENIED, naming them, if any of these shards is outside the
    key's scopes (its shard-id prefixes; none: every shard)."""
    outside = sorted({s for s in shard_ids if not key.allows_shard(s)})
    if outside:
        raise OutOfScope(outside, key.shard_prefixes)


def reads_check(key: ApiKey, *, agent_id: str = "", shard_ids: Iterable[str] = ()) -> None:
    """What an open socket or stream needs to go on: the agent it acts as, and
    ``shard:read`` with scope over every shard id (or watched id prefix) it
    reads. The one check, whatever the transport (``GET /api/watch``,
    /ws/agents/, /ws/crdt/): when it opens, and again each time its key changes
    (realtime.keywatch), so a narrowed key ends what it no longer covers."""
    agent_check(key, agent_id)
    reads = list(shard_ids)
    if reads:
        permission_check(key, "shard:read")
        scope_check(key, reads)


def can_watch(user: Any) -> bool:
    """Who may see the console and the live pages: staff, or anyone allowed to
    see approvals."""
    return bool(
        user.is_authenticated
        and user.is_active
        and (user.is_staff or user.has_perm("approvals.view_approval"))
    )


# --- Django REST framework -------------------------------------------------------------


def principal_admit(key: ApiKey | ApiError | None, *, raw: str, agent_id: str) -> Principal:
    """Who an API call is, from its resolved key (``request_key``) and the agent it
    claims: 401 without a usable key (recorded), 400/403 for an agent it may not
    act as. The API's authentication, over HTTP and in the direct lane alike."""
    if key is None:
        raise Unauthenticated()
    if isinstance(key, ApiError):
        raise authentication_refused(key, raw=raw)
    return Principal(key=key, agent_id=agent_check(key, agent_id))


def call_permitted(
    who: Principal, *, method: str, needed: str | None, shard_id: str | None
) -> None:
    """What an API call needs before its view runs: the permission its view names
    for the method, an acting agent for a write, and scope over the shard in its
    path. The API's permission check, over HTTP and in the direct lane alike."""
    if needed:
        permission_check(who.key, needed)
    if method not in ("GET", "HEAD", "OPTIONS"):
        agent_required(who.agent_id)
    if shard_id is not None:
        scope_check(who.key, [shard_id])


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Principal, ApiKey] | None:
        # Resolved, and counted against the key or the address, by RateLimitMiddleware.
        who = principal_admit(
            request_key(request._request),
            raw=request.META.get("HTTP_X_API_KEY", ""),
            agent_id=request_agent_id(request._request),
        )
        return who, who.key

    def authenticate_header(self, request: Request) -> str:
        return "X-API-Key"


class HasKeyPermission(BasePermission):
    """Views name what they need: ``required_permissions = {"GET": "shard:read", ...}``.
    Write methods also need an acting agent (X-Agent-Id)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request.user
        if not isinstance(principal, Principal):
            return False
        call_permitted(
            principal,
            method=str(request.method),
            needed=getattr(view, "required_permissions", {}).get(request.method),
            shard_id=view.kwargs.get("shard_id"),
        )
        return True
