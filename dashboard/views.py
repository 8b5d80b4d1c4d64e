"""Operators' pages: shards, one shard, metrics. Read-only and server-rendered;
live updates arrive over /ws/live/ (see static/console/console.js)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from access.auth import can_watch
from approvals.diffview import line_diff, pretty
from approvals.selectors import approval_counts, approvals_of_commits, pending_on_shard
from audit.models import AuditAction, AuditEntry
from coordination.reservations import reservations_list
from coordination.sessions import agents_live
from metrics import record
from metrics.models import CommitSample
from shards.models import Shard, ShardType
from shards.selectors import shard_current_value

LIST_LIMIT = 500
HISTORY_LIMIT = 200  # versions offered for comparison
HISTORY_PAGE = 50
CONFLICTS_SHOWN = 10
# Natural order needs every matching id in memory; past this many the list
# falls back to the database's plain order.
NATURAL_SORT_MAX = 20_000
WINDOW_SECONDS = 60

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple:
    """ "lat.2" before "lat.10": digit runs compare as numbers."""
    return tuple(
        (0, int(part), part) if part.isdigit() else (1, 0, part)
        for part in _DIGITS.split(text)
        if part
    )


def _watcher(request: HttpRequest) -> None:
    if not can_watch(request.user):
        raise PermissionDenied("Dashboards are for staff and the Viewers group.")


def _shards_context(request: HttpRequest) -> dict:
    prefix = request.GET.get("prefix", "").strip()
    shard_type = request.GET.get("type", "")
    if shard_type not in ShardType.values:
        shard_type = ""
    shards = Shard.objects.without_payload().with_prefix(prefix).of_type(shard_type)
    ids = list(shards.order_by("id").values_list("id", flat=True)[: NATURAL_SORT_MAX + 1])
    if len(ids) <= NATURAL_SORT_MAX:
        first = sorted(ids, key=natural_key)[:LIST_LIMIT]
        by_id = {shard.id: shard for shard in shards.filter(pk__in=first)}
        listed = [by_id[i] for i in first if i in by_id]
    else:
        listed = list(shards.order_by("id")[:LIST_LIMIT])
    return {
        "shards": listed,
        "prefix": prefix,
        "type": shard_type,
        "types": ShardType.values,
        "limit": LIST_LIMIT,
    }


@login_required
@require_GET
def shards_page(request: HttpRequest) -> HttpResponse:
    _watcher(request)
    return render(request, "dashboard/shards.html", _shards_context(request))


@login_required
@require_GET
def shard_rows(request: HttpRequest) -> HttpResponse:
    _watcher(request)
    return render(request, "dashboard/_shard_rows.html", _shards_context(request))


def _shard_context(request: HttpRequest, shard_id: str) -> dict | None:
    shard = Shard.objects.filter(pk=shard_id).first()
    if shard is None:
        return None
    shard.value = shard_current_value(shard)
    history = AuditEntry.objects.history_of(shard).reverse()
    page = Paginator(history, HISTORY_PAGE).get_page(request.GET.get("page"))
    # A commit an approval made links to it and names who approved it: the
    # history answers "who let this through?" without a search.
    approved = approvals_of_commits(shard.id, [entry.id for entry in page], request.user)
    for entry in page:
        entry.value_json = json.dumps(entry.value, sort_keys=True)
        entry.approved = approved.get(entry.id)
    conflicts = list(
        AuditEntry.objects.filter(
            shard_id=shard.id,
            action=AuditAction.SHARD_COMMIT_REJECTED,
            created_at__gte=shard.created_at,
        ).order_by("-id")[:CONFLICTS_SHOWN]
    )
    context = {
        "shard": shard,
        "value": pretty(shard.value),
        "history": page,
        "conflicts": conflicts,
        "subscribers": record.shard_subscribers(shard.id),
        "pending": pending_on_shard(shard.id, request.user),
        "versions": sorted(
            history.exclude(version_after=None).values_list("version_after", flat=True)[
                :HISTORY_LIMIT
            ]
        ),
    }
    # Decision shards keep whole values per version; additive ones keep operations.
    a, b = request.GET.get("a", ""), request.GET.get("b", "")
    if shard.type == ShardType.DECISION and a.isdigit() and b.isdigit():
        pair = {e.version_after: e for e in history.filter(version_after__in=[int(a), int(b)])}
        old, new = pair.get(int(a)), pair.get(int(b))
        if old and new:
            context.update(diff=line_diff(old.value, new.value), a=int(a), b=int(b))
    return context


@login_required
@require_GET
def shard_page(request: HttpRequest, shard_id: str) -> HttpResponse:
    _watcher(request)
    context = _shard_context(request, shard_id)
    if context is None:
        return render(request, "dashboard/missing.html", {"shard_id": shard_id}, status=404)
    return render(request, "dashboard/shard.html", context)


@login_required
@require_GET
def shard_live(request: HttpRequest, shard_id: str) -> HttpResponse:
    _watcher(request)
    context = _shard_context(request, shard_id)
    if context is None:
        return HttpResponse("<p>This shard has been deleted.</p>")
    return render(request, "dashboard/_shard_live.html", context)


def _agents_context() -> dict[str, Any]:
    """The connected agents, each with the path reservations it holds, and every
    live reservation (an agent that disconnected may still hold some)."""
    reservations = reservations_list()["results"]
    agents = agents_live()
    for agent in agents:
        agent["reservations"] = [
            r
            for r in reservations
            if r["holder"] == agent["agent_id"] and r["key"]["prefix"] == agent["key"]["prefix"]
        ]
    return {"agents": agents, "reservations": reservations}


@login_required
@require_GET
def agents_page(request: HttpRequest) -> HttpResponse:
    _watcher(request)
    return render(request, "dashboard/agents.html", _agents_context())


@login_required
@require_GET
def agent_rows(request: HttpRequest) -> HttpResponse:
    _watcher(request)
    return render(request, "dashboard/_agent_rows.html", _agents_context() | {"oob": True})


@login_required
@require_GET
def metrics_page(request: HttpRequest) -> HttpResponse:
    _watcher(request)
    return render(request, "dashboard/metrics.html", {})


def _minute(series: list[dict]) -> dict:
    """The tiles and the hot shards over exactly the seconds the charts draw
    (``per_second`` stops at the last whole second), so tile and chart agree:
    the rates are the mean of the plotted points, the latency percentile is
    over the same samples."""
    if not series:
        return {"commits_per_second": 0, "conflicts_per_second": 0, "p99": None, "hot": []}
    since = datetime.fromisoformat(series[0]["t"])
    until = since + timedelta(seconds=len(series))
    samples = CommitSample.objects.filter(at__gte=since, at__lt=until)
    latencies = sorted(samples.values_list("latency_ms", flat=True))
    hot: dict[str, dict] = {}
    for shard_id, outcome in samples.values_list("shard_id", "outcome"):
        row = hot.setdefault(shard_id, {"shard_id": shard_id, "commits": 0, "conflicts": 0})
        row["commits" if outcome == CommitSample.OK else "conflicts"] += 1
    # By commits, as the table's title says; conflicts only break ties (a shard
    # hammered by refused writes is not the hottest writer).
    ranked = sorted(hot.values(), key=lambda r: (-r["commits"], -r["conflicts"], r["shard_id"]))
    seconds = len(series)
    return {
        "seconds": seconds,
        "commits_per_second": round(sum(p["commits"] for p in series) / seconds, 3),
        "conflicts_per_second": round(sum(p["conflicts"] for p in series) / seconds, 3),
        # Rounded as the charts' per-second points are (metrics/record.py).
        "p99": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 2)
        if latencies
        else None,
        "hot": ranked[:5],
    }


@login_required
@require_GET
def metrics_data(request: HttpRequest) -> JsonResponse:
    _watcher(request)
    series = record.per_second(WINDOW_SECONDS)
    return JsonResponse(
        {
            "series": series,
            "approvals": approval_counts(),
            "ws": record.ws_metrics(),
            "last_minute": record.window(WINDOW_SECONDS),
            "tiles": _minute(series),
        }
    )
