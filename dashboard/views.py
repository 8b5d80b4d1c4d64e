"""Operators' pages: shards, one shard, metrics. Read-only and server-rendered;
live updates arrive over /ws/live/ (see static/console/console.js)."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from access.auth import can_watch
from approvals.diffview import line_diff, pretty
from approvals.models import Approval, ApprovalStatus
from audit.models import AuditEntry
from metrics import record
from shards.models import Shard, ShardType
from shards.selectors import shard_current_value

LIST_LIMIT = 500
HISTORY_LIMIT = 200


def _watcher(request: HttpRequest) -> None:
    if not can_watch(request.user):
        raise PermissionDenied("Dashboards are for staff and the Viewers group.")


def _shards_context(request: HttpRequest) -> dict:
    prefix = request.GET.get("prefix", "").strip()
    shard_type = request.GET.get("type", "")
    if shard_type not in ShardType.values:
        shard_type = ""
    shards = Shard.objects.without_payload().with_prefix(prefix).of_type(shard_type)
    return {
        "shards": shards.order_by("id")[:LIST_LIMIT],
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
    entries = list(AuditEntry.objects.history_of(shard).reverse()[:HISTORY_LIMIT])
    by_version = {e.version_after: e for e in entries}
    context = {
        "shard": shard,
        "value": pretty(shard.value),
        "history": entries,
        "subscribers": record.shard_subscribers(shard.id),
        "pending": Approval.objects.pending().filter(shard_id=shard.id).newest_first(),
        "versions": sorted(by_version),
    }
    # Decision shards keep whole values per version; additive ones keep operations.
    a, b = request.GET.get("a", ""), request.GET.get("b", "")
    if shard.type == ShardType.DECISION and a.isdigit() and b.isdigit():
        old, new = by_version.get(int(a)), by_version.get(int(b))
        if old and new:
            context.update(diff=line_diff(old.value, new.value), a=int(a), b=int(b))
    for entry in entries:
        entry.value_json = json.dumps(entry.value, sort_keys=True)
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


@login_required
@require_GET
def metrics_page(request: HttpRequest) -> HttpResponse:
    _watcher(request)
    return render(request, "dashboard/metrics.html", {})


@login_required
@require_GET
def metrics_data(request: HttpRequest) -> JsonResponse:
    _watcher(request)
    statuses = {s: Approval.objects.with_status(s).count() for s in ApprovalStatus.values}
    return JsonResponse(
        {
            "series": record.per_second(60),
            "approvals": statuses,
            "ws": record.ws_metrics(),
            "last_minute": record.window(60),
        }
    )
