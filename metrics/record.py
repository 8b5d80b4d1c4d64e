"""Metrics that add up across server processes.

Everything lands in the database, written behind by one thread per process
(a commit never waits for its own metric):
- a ``CommitSample`` per commit attempt (time, shard, latency, outcome): the
  per-minute / per-hour figures, percentiles and hot spots come from these;
- ``MetricCounter`` rows (name -> total since the database was created):
  commits, conflicts, claims, WebSocket messages sent and what a naive
  broadcast would have sent;
- one ``SocketGauge`` row per live process (connections, subscriptions, and
  subscribers per shard), refreshed every second; rows not refreshed for a few
  seconds belong to a process that is gone and are not counted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from common.db import sqlite_writer_queue
from common.inputs import iso_time
from common.writebehind import WriteBehind
from metrics.models import CommitSample, MetricCounter, SocketGauge

logger = logging.getLogger(__name__)
FLUSH_SECONDS = 0.5
GAUGE_FRESH_SECONDS = 5
SAMPLE_RETENTION = timedelta(hours=24)
PROCESS_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"

COMMITS, CONFLICTS, CLAIMS = "commits", "conflicts", "claims"
WS_SENT, WS_NAIVE = "ws_messages_sent", "ws_naive_broadcast_messages"
# Commit to last invalidate frame written, per change and server process: counted
# in buckets (upper bounds, ms), because counters are what adds up across processes.
PUSH_DELAY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
PUSH_DELAY_PREFIX = "push_delay_ms_le_"
PUSH_DELAY_OVER = "push_delay_ms_over"


def push_delay_counter(ms: float) -> str:
    """The counter a fan-out that took ``ms`` falls in (the first bound that holds it)."""
    for bound in PUSH_DELAY_BUCKETS_MS:
        if ms <= bound:
            return f"{PUSH_DELAY_PREFIX}{bound}"
    return PUSH_DELAY_OVER


class _Recorder:
    """This process's pending samples, counter increments and socket gauges."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: list[CommitSample] = []
        self._counts: Counter[str] = Counter()
        self.connections = 0
        self.shard_subscribers: Counter[str] = Counter()
        self._gauge_written: tuple | None = None
        self._gauge_at = 0.0
        # Nothing is queued: the state above is the backlog; the thread writes it
        # (and refreshes this process's gauge) every FLUSH_SECONDS.
        self._writer: WriteBehind[None] = WriteBehind(
            "metrics-writer",
            lambda _: self.flush_now(),
            period=FLUSH_SECONDS,
            enabled=lambda: settings.ZEROLOCK_METRICS_WRITE_BEHIND,
            tick=True,
        )

    # --- what the rest of the code calls ---------------------------------------

    def commit(self, *, shard_id: str, latency_ms: float, outcome: str) -> None:
        sample = CommitSample(
            at=timezone.now(), shard_id=shard_id, latency_ms=latency_ms, outcome=outcome
        )
        with self._lock:
            self._samples.append(sample)
            self._counts[COMMITS if outcome == CommitSample.OK else CONFLICTS] += 1
        self._after_change()

    def count(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[name] += n
            self._after_change()

    def push_delay(self, seconds: float) -> None:
        """One change's fan-out in this process ended ``seconds`` after its commit."""
        self.count(push_delay_counter(seconds * 1000))

    def socket_opened(self) -> None:
        with self._lock:
            self.connections += 1
        self._after_change()

    def socket_closed(self, shard_ids: set[str]) -> None:
        with self._lock:
            self.connections -= 1
            self.shard_subscribers.subtract(shard_ids)
            self.shard_subscribers = +self.shard_subscribers
        self._after_change()

    def subscribed(self, shard_ids: set[str], n: int = 1) -> None:
        with self._lock:
            for shard_id in shard_ids:
                self.shard_subscribers[shard_id] += n
            self.shard_subscribers = +self.shard_subscribers
        self._after_change()

    # --- writing -----------------------------------------------------------------

    def _after_change(self) -> None:
        if not settings.ZEROLOCK_METRICS_WRITE_BEHIND:
            # Inline (tests); from an event loop the next synchronous call writes it.
            if not _in_event_loop():
                self.flush_now()
            return
        self._writer.ensure_running()

    def flush_now(self) -> None:
        with self._lock:
            samples, self._samples = self._samples, []
            counts, self._counts = self._counts, Counter()
            gauge = (self.connections, dict(self.shard_subscribers))
        due = gauge != self._gauge_written or time.monotonic() - self._gauge_at > 1
        if not (samples or counts or (due and (gauge[0] or self._gauge_written))):
            return
        with sqlite_writer_queue(), transaction.atomic():
            if samples:
                CommitSample.objects.bulk_create(samples)
            for name, n in counts.items():
                if not MetricCounter.objects.filter(name=name).update(value=F("value") + n):
                    # First count ever: two writers (processes, or threads when
                    # written inline) may both get here; get_or_create settles it.
                    MetricCounter.objects.get_or_create(name=name, defaults={"value": 0})
                    MetricCounter.objects.filter(name=name).update(value=F("value") + n)
            if due:
                SocketGauge.objects.update_or_create(
                    process=PROCESS_ID,
                    defaults={
                        "connections": gauge[0],
                        "subscriptions": sum(gauge[1].values()),
                        "shard_subscribers": gauge[1],
                        "updated_at": timezone.now(),
                    },
                )
        if due:
            self._gauge_written, self._gauge_at = gauge, time.monotonic()


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


recorder = _Recorder()


# --- reading -----------------------------------------------------------------------


def _live_gauges() -> Any:
    return SocketGauge.objects.filter(
        updated_at__gte=timezone.now() - timedelta(seconds=GAUGE_FRESH_SECONDS)
    )


_connections_cache: tuple[float, int] = (0.0, 0)
CONNECTIONS_CACHE_SECONDS = 1.0


def connections_total() -> int:
    """Open agent sockets across processes (cached for a second: it is read on
    every commit to count what a naive broadcast would have sent)."""
    global _connections_cache
    at, value = _connections_cache
    if time.monotonic() - at < CONNECTIONS_CACHE_SECONDS:
        return value
    value = sum(_live_gauges().values_list("connections", flat=True))
    _connections_cache = (time.monotonic(), value)
    return value


def shard_subscribers(shard_id: str) -> int:
    return sum(
        (gauge or {}).get(shard_id, 0)
        for gauge in _live_gauges().values_list("shard_subscribers", flat=True)
    )


def counters() -> dict[str, int]:
    return dict(MetricCounter.objects.values_list("name", "value"))


def ws_metrics() -> dict[str, Any]:
    totals = counters()
    sent, naive = totals.get(WS_SENT, 0), totals.get(WS_NAIVE, 0)
    gauges = list(_live_gauges().values_list("connections", "subscriptions"))
    return {
        "messages_sent": sent,
        "naive_broadcast_messages": naive,
        "cost_savings_percent": round(100 * (1 - sent / naive), 2) if naive else 0.0,
        "connections": sum(c for c, _ in gauges),
        "subscriptions": sum(s for _, s in gauges),
        "processes": len(gauges),
        "push_delay_ms": push_delay_summary(totals),
    }


def push_delay_summary(totals: dict[str, int]) -> dict[str, Any]:
    """Since the database began: per change and server process with subscribers,
    commit to the last ``invalidate`` frame handed to the server. ``buckets``
    counts changes per upper bound in ms ("over" past the last); the percentiles
    are the bound of the bucket they fall in."""
    names = [f"{PUSH_DELAY_PREFIX}{b}" for b in PUSH_DELAY_BUCKETS_MS] + [PUSH_DELAY_OVER]
    counts = [totals.get(name, 0) for name in names]
    labels = [str(b) for b in PUSH_DELAY_BUCKETS_MS] + ["over"]
    return {
        "fanouts": sum(counts),
        "buckets": dict(zip(labels, counts, strict=True)),
        "p50": bucket_percentile(counts, 50),
        "p99": bucket_percentile(counts, 99),
    }


def bucket_percentile(counts: list[int], p: float) -> int | None:
    """The upper bound (ms) of the bucket holding the p-th percentile; None when
    there is nothing counted or it lies past the last bound."""
    total = sum(counts)
    if not total:
        return None
    rank, seen = p / 100 * total, 0
    for bound, n in zip(PUSH_DELAY_BUCKETS_MS, counts, strict=False):
        seen += n
        if seen >= rank:
            return bound
    return None


def _percentile(ordered: list[float], p: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 2)


def window(seconds: int, *, hot: int = 5, scopes: list[str] | None = None) -> dict[str, Any]:
    """The last ``seconds``: counts and latencies of every commit, and the hot
    shards among those inside ``scopes`` (a key's shard-id prefixes; None: all)."""
    since = timezone.now() - timedelta(seconds=seconds)
    samples = CommitSample.objects.filter(at__gte=since)
    outcomes = dict(samples.order_by().values_list("outcome").annotate(n=Count("id")))
    commits, conflicts = outcomes.get(CommitSample.OK, 0), outcomes.get(CommitSample.CONFLICT, 0)
    latencies = sorted(samples.values_list("latency_ms", flat=True))
    hot_shards = (
        samples.within_scopes(scopes or [])
        .order_by()
        .values("shard_id")
        .annotate(
            commits=Count("id", filter=Q(outcome=CommitSample.OK)),
            conflicts=Count("id", filter=Q(outcome=CommitSample.CONFLICT)),
            attempts=Count("id"),
        )
        .order_by("-attempts", "shard_id")[:hot]
    )
    return {
        "seconds": seconds,
        "commits": commits,
        "conflicts": conflicts,
        "commits_per_second": round(commits / seconds, 3),
        "conflicts_per_second": round(conflicts / seconds, 3),
        "latency_ms": {
            p: _percentile(latencies, n) for p, n in (("p50", 50), ("p90", 90), ("p99", 99))
        },
        "hot_shards": [
            {"shard_id": h["shard_id"], "commits": h["commits"], "conflicts": h["conflicts"]}
            for h in hot_shards
        ],
    }


def per_second(seconds: int = 60) -> list[dict[str, Any]]:
    """The last ``seconds`` one second at a time, for the live charts."""
    now = timezone.now().replace(microsecond=0)
    since = now - timedelta(seconds=seconds)
    buckets: dict[int, list] = {i: [0, 0, []] for i in range(seconds)}
    for at, outcome, latency in CommitSample.objects.filter(at__gte=since, at__lt=now).values_list(
        "at", "outcome", "latency_ms"
    ):
        bucket = buckets[int((at - since).total_seconds())]
        bucket[0 if outcome == CommitSample.OK else 1] += 1
        bucket[2].append(latency)
    series = []
    for i in range(seconds):
        commits, conflicts, latencies = buckets[i]
        latencies.sort()
        series.append(
            {
                "t": iso_time(since + timedelta(seconds=i)),
                "commits": commits,
                "conflicts": conflicts,
                "p50": _percentile(latencies, 50),
                "p99": _percentile(latencies, 99),
            }
        )
    return series


def samples_prune(*, now: Any = None) -> int:
    cutoff = (now or timezone.now()) - SAMPLE_RETENTION
    deleted, _ = CommitSample.objects.filter(at__lt=cutoff).delete()
    SocketGauge.objects.filter(updated_at__lt=cutoff).delete()
    return deleted
