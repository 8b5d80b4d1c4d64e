"""Sliding-window rate limiting: counts in this process's memory on the embedded
default (one process serves it all, and a dict costs nothing), in Redis with
REDIS_URL, so several processes share one count. Far below its limit a count
goes to Redis in batches (see ``CacheCounts``); near it, on every request.

The window is approximated the usual way: this minute's count plus last minute's
count weighted by how much of last minute still lies inside the window. Counts
move with atomic cache increments, so concurrent requests cannot both take the
last slot.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.core.cache import cache

from common.errors import ApiError, RateLimited

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


COUNT_TTL = WINDOW_SECONDS * 2 + 5


class WindowCounts(Protocol):
    def hit(self, identity: str, window: int, limit: int) -> tuple[int, int]:
        """Adds one to ``window``'s count; returns (previous window's, this one's)."""

    def undo(self, identity: str, window: int) -> None:
        """Takes back the one just added (a refused request is not counted)."""


class LocalCounts:
    """Counts in this process: the embedded default runs one server process."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._pruned = 0

    def hit(self, identity: str, window: int, limit: int) -> tuple[int, int]:
        with self._lock:
            if window != self._pruned:  # once a minute, drop windows nobody reads
                self._counts = {k: v for k, v in self._counts.items() if k[1] >= window - 1}
                self._pruned = window
            current = self._counts.get((identity, window), 0) + 1
            self._counts[(identity, window)] = current
            return self._counts.get((identity, window - 1), 0), current

    def undo(self, identity: str, window: int) -> None:
        with self._lock:
            if self._counts.get((identity, window), 0) > 0:
                self._counts[(identity, window)] -= 1


# Below half its limit, a count reaches Redis once per BATCH requests of this
# process (or every SYNC_SECONDS), not once per request: the round trip was
# 14 % of a GET's CPU on PostgreSQL + Redis (profiled). A process holds back at
# most BATCH - 1 requests nobody else has seen, and answers at most BATCH - 1
# on a view that others may since have outgrown, so with P processes a key can
# pass its limit by at most 2 x P x (BATCH - 1); from half its limit on, every
# request is counted in Redis before it is answered, and with one process the
# count is exact throughout (its own hits are all it holds back).
BATCH = 8
SYNC_SECONDS = 0.25


@dataclass
class _Pending:
    known: int = 0  # this window's count in Redis at the last round trip
    previous: int = 0  # last window's, read then
    unsent: int = 0  # this process's hits since
    synced_at: float = 0.0


class CacheCounts:
    """Counts in the shared cache (Redis): one pipelined round trip per batch."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._lock = threading.Lock()
        self._pruned = 0

    @staticmethod
    def _key(identity: str, window: int) -> str:
        return f"ratelimit:{identity}:{window}"

    def hit(self, identity: str, window: int, limit: int) -> tuple[int, int]:
        with self._lock:
            if window != self._pruned:  # once a minute, drop windows nobody reads
                self._pending = {k: v for k, v in self._pending.items() if k[1] >= window}
                self._pruned = window
            pending = self._pending.setdefault((identity, window), _Pending())
            pending.unsent += 1
            now = time.monotonic()
            far_below = (pending.known + pending.unsent + BATCH) * 2 <= limit
            if (
                far_below
                and pending.unsent < BATCH
                and pending.synced_at
                and now - pending.synced_at < SYNC_SECONDS
            ):
                return pending.previous, pending.known + pending.unsent
            unsent, pending.unsent = pending.unsent, 0
        # The round trip outside the lock: other identities' hits need not wait.
        try:
            previous, current = self._add(identity, window, unsent)
        except BaseException:
            with self._lock:
                pending.unsent += unsent  # not counted in Redis: keep it for the next trip
            raise
        with self._lock:
            pending.known = max(pending.known, current)
            pending.previous = previous
            pending.synced_at = now
            return previous, current + pending.unsent

    def _add(self, identity: str, window: int, amount: int) -> tuple[int, int]:
        current_key = self._key(identity, window)
        client = _redis_client()
        if client is not None:
            made = cache.make_and_validate_key(current_key)
            pipe = client.pipeline(transaction=False)
            pipe.incrby(made, amount)
            pipe.expire(made, COUNT_TTL)
            pipe.get(cache.make_and_validate_key(self._key(identity, window - 1)))
            current, _, previous = pipe.execute()
            return int(previous or 0), int(current)
        previous = cache.get(self._key(identity, window - 1), 0)
        cache.add(current_key, 0, timeout=COUNT_TTL)
        try:
            current = cache.incr(current_key, amount)
        except ValueError:  # expired between add and incr
            cache.set(current_key, amount, timeout=COUNT_TTL)
            current = amount
        return previous, current

    def undo(self, identity: str, window: int) -> None:
        with self._lock:
            pending = self._pending.get((identity, window))
            if pending is not None and pending.unsent > 0:
                pending.unsent -= 1
                return
            if pending is not None:
                pending.known = max(0, pending.known - 1)
        with contextlib.suppress(ValueError):  # expired meanwhile: nothing to take back
            cache.decr(self._key(identity, window))


def _redis_client() -> Any:
    """The raw redis client behind Django's Redis cache, or None for other caches.
    Counts are stored as plain integers (INCR) either way, which Django's
    RedisCache reads back as integers too."""
    inner = getattr(cache, "_cache", None)
    get_client = getattr(inner, "get_client", None)
    return get_client(write=True) if get_client is not None else None


_local_counts = LocalCounts()
_cache_counts = CacheCounts()


def window_counts() -> WindowCounts:
    """Where counts live: in memory unless a shared (non-local) cache is configured."""
    backend = settings.CACHES["default"]["BACKEND"]
    return _local_counts if backend.endswith("LocMemCache") else _cache_counts


def rate_limit_hit(*, identity: str, limit: int, now: float | None = None) -> RateState:
    """Counts one request for ``identity``; refused requests are not counted."""
    now = time.time() if now is None else now
    window = int(now // WINDOW_SECONDS)
    counts = window_counts()
    previous, current = counts.hit(identity, window, limit)
    state = sliding_window(
        limit=limit, previous=previous, current=current, elapsed=now - window * WINDOW_SECONDS
    )
    if not state.allowed:
        counts.undo(identity, window)
    return state


def rate_limited_error(state: RateState, who: str) -> ApiError:
    return RateLimited(limit=state.limit, who=who, retry_after=state.retry_after)
