"""Sliding-window rate limiting on the Django cache (local memory by default,
Redis with REDIS_URL, so several processes share one count).

The window is approximated the usual way: this minute's count plus last minute's
count weighted by how much of last minute still lies inside the window. Counts
move with atomic cache increments, so concurrent requests cannot both take the
last slot.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from django.core.cache import cache

from common.errors import ApiError

WINDOW_SECONDS = 60


@dataclass(frozen=True)
class RateState:
    limit: int
    remaining: int
    reset_seconds: int
    retry_after: int | None  # set when the request was refused

    @property
    def allowed(self) -> bool:
        return self.retry_after is None

    def headers(self) -> dict[str, str]:
        headers = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.reset_seconds),
        }
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        return headers


def sliding_window(*, limit: int, previous: int, current: int, elapsed: float) -> RateState:
    """The pure rule. ``current`` counts this minute's requests including this
    one, ``previous`` last minute's; ``elapsed`` is how far into this minute we
    are. Refused: ``retry_after`` is the wait after which the same request, with
    nothing else sent meanwhile, would pass."""
    carried = previous * (WINDOW_SECONDS - elapsed) / WINDOW_SECONDS
    used = carried + current
    reset = math.ceil(WINDOW_SECONDS - elapsed)
    if used <= limit:
        return RateState(limit, max(0, math.floor(limit - used)), reset, None)
    before = current - 1  # this minute without the refused request, which is not counted
    if before >= limit:
        # This minute alone is full: wait for it to end and for its weight to fade.
        wait = (WINDOW_SECONDS - elapsed) + WINDOW_SECONDS * (1 - (limit - 1) / before)
    else:
        # Last minute's tail is what is over: wait until enough of it slides out.
        wait = WINDOW_SECONDS * (1 - (limit - 1 - before) / previous) - elapsed
    return RateState(limit, 0, reset, max(1, math.ceil(wait)))


def rate_limit_hit(*, identity: str, limit: int, now: float | None = None) -> RateState:
    """Counts one request for ``identity``; refused requests are not counted."""
    now = time.time() if now is None else now
    window = int(now // WINDOW_SECONDS)
    current_key = f"ratelimit:{identity}:{window}"
    previous = cache.get(f"ratelimit:{identity}:{window - 1}", 0)
    cache.add(current_key, 0, timeout=WINDOW_SECONDS * 2 + 5)
    try:
        current = cache.incr(current_key)
    except ValueError:  # expired between add and incr
        cache.set(current_key, 1, timeout=WINDOW_SECONDS * 2 + 5)
        current = 1
    state = sliding_window(
        limit=limit, previous=previous, current=current, elapsed=now - window * WINDOW_SECONDS
    )
    if not state.allowed:
        cache.decr(current_key)
    return state


def rate_limited_error(state: RateState, who: str) -> ApiError:
    return ApiError(
        429,
        "RATE_LIMITED",
        f"Rate limit of {state.limit} requests per minute exceeded for {who}; "
        f"retry in {state.retry_after} s.",
        retry_after=state.retry_after,
    )
