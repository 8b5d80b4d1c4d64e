"""Rate limits for /api/ and the X-RateLimit-* headers on every API response.

A request with a valid API key is counted against that key (its own
``rate_limit`` or ZEROLOCK_RATE_LIMIT_PER_MINUTE); only requests without one
(no key, unknown, revoked or expired: floods and guessing) are counted against
the client address (ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE). Counting every request
per address throttled any group of agents sharing a machine, each with its own
valid key."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from access.auth import address_rate_hit, key_rate_hit, request_address, request_key
from access.models import ApiKey
from access.ratelimit import RateState, rate_limited_error
from common.paths import is_api_path


def rate_limited_response(state: RateState, who: str) -> JsonResponse:
    response = JsonResponse(rate_limited_error(state, who).envelope(), status=429)
    rate_headers_set(response, state)
    return response


def rate_headers_set(response: HttpResponse, state: RateState) -> None:
    """The X-RateLimit-* headers every API answer carries."""
    for name, value in state.headers().items():
        response[name] = value


def request_rate_hit(request: HttpRequest) -> tuple[RateState, str]:
    """Counts the request once, against its key or else its address."""
    key = request_key(request)
    if isinstance(key, ApiKey):
        return key_rate_hit(key), "this key"
    return address_rate_hit(request_address(request)), "this address"


class RateLimitMiddleware:
    """Sync-only on purpose (see MIDDLEWARE in settings)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not is_api_path(request.path):
            return self.get_response(request)
        state, who = request_rate_hit(request)
        if not state.allowed:
            return rate_limited_response(state, who)
        response = self.get_response(request)
        rate_headers_set(response, state)
        return response
