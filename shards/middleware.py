"""Per-client-IP rate limit and the X-RateLimit-* headers on every API response."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from .ratelimit import RateState, rate_limit_hit, rate_limited_error


def attach_rate_state(request: HttpRequest, state: RateState) -> None:
    """Keeps the tightest limit seen for this request; its headers go on the response."""
    current = getattr(request, "zerolock_rate", None)
    if current is None or state.remaining < current.remaining or not state.allowed:
        request.zerolock_rate = state


def rate_limited_response(state: RateState) -> JsonResponse:
    response = JsonResponse(rate_limited_error(state, "this address").envelope(), status=429)
    for name, value in state.headers().items():
        response[name] = value
    return response


class RateLimitMiddleware:
    """Sync-only on purpose (see MIDDLEWARE in settings)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        state = rate_limit_hit(
            identity=f"ip:{request.META.get('REMOTE_ADDR', '')}",
            limit=settings.ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE,
        )
        if not state.allowed:
            return rate_limited_response(state)
        attach_rate_state(request, state)
        response = self.get_response(request)
        for name, value in request.zerolock_rate.headers().items():
            response[name] = value
        return response
