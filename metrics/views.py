"""Thin HTTP views: parse, call one service, render. GET /api/metrics itself is
in access/views.py: it shows hot shards only inside the key's scopes."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView

from . import record

READ = "shard:read"


class WsMetricsView(ApiView):
    required_permissions = {"GET": READ}

    @extend_schema(responses=dict)
    def get(self, request: Request) -> Response:
        return Response(record.ws_metrics())
