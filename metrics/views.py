"""Thin HTTP views: parse, call one service, render."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView

from . import record
from .sources import sources

READ = "shard:read"


class MetricsView(ApiView):
    """Commits, conflicts, claims and approvals over the last minute, the last hour
    and since the database began; latency percentiles; the hottest shards."""

    required_permissions = {"GET": READ}

    @extend_schema(responses=dict)
    def get(self, request: Request) -> Response:
        totals = record.counters()
        return Response(
            {
                "last_minute": record.window(60),
                "last_hour": record.window(3600),
                "since_start": {
                    name: totals.get(name, 0)
                    for name in (record.COMMITS, record.CONFLICTS, record.CLAIMS)
                },
                # Figures from the apps above (approvals), which register them.
                **{name: figures() for name, figures in sorted(sources.items())},
            }
        )


class WsMetricsView(ApiView):
    required_permissions = {"GET": READ}

    @extend_schema(responses=dict)
    def get(self, request: Request) -> Response:
        return Response(record.ws_metrics())
