"""GET /api/audit and GET /api/metrics as a key may see them: a scoped key sees
only its shards (audit entries, hot shards). Here, not in the audit and metrics
apps, because they need the key."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from access.auth import principal
from audit.models import AuditEntry
from audit.serializers import AuditEntrySerializer, AuditQuerySerializer, audit_data
from common import pages
from common.api import ApiView
from common.inputs import parsed
from metrics import record
from metrics.sources import sources

ADMIN, READ = "admin", "shard:read"


class AuditListView(ApiView):
    required_permissions = {"GET": ADMIN}

    @extend_schema(
        parameters=[AuditQuerySerializer],
        responses={
            200: OpenApiResponse(
                AuditEntrySerializer(many=True),
                description="Oldest first. A list cut short (by `limit` or by "
                'ZEROLOCK_LIST_MAX_BYTES) carries `Link: <url>; rel="next"`.',
            )
        },
    )
    def get(self, request: Request) -> HttpResponse:
        query = parsed(AuditQuerySerializer, request.query_params.dict())
        entries = (
            AuditEntry.objects.within_scopes(principal(request).key.shard_prefixes)
            .since(query.get("since"))
            .filter(id__gt=query["after"])
        )
        for field in ("shard_id", "agent_id", "action"):
            if query.get(field):
                entries = entries.filter(**{field: query[field]})
        limit = query["limit"]
        rows = entries.order_by("id")[: limit + 1].iterator(chunk_size=pages.FETCH_CHUNK)
        page = pages.page_collect(rows, audit_data, limit=limit)
        return pages.list_response(request, page, "after", page.last.pk if page.last else None)


class MetricsView(ApiView):
    """Commits, conflicts, claims and approvals over the last minute, the last hour
    and since the database began; latency percentiles; the hottest shards (of
    those inside the key's scopes: the counts are the server's, the ids the key's)."""

    required_permissions = {"GET": READ}

    @extend_schema(responses=dict)
    def get(self, request: Request) -> Response:
        scopes = principal(request).key.shard_prefixes
        totals = record.counters()
        return Response(
            {
                "last_minute": record.window(60, scopes=scopes),
                "last_hour": record.window(3600, scopes=scopes),
                "since_start": {
                    name: totals.get(name, 0)
                    for name in (record.COMMITS, record.CONFLICTS, record.CLAIMS)
                },
                # Figures from the apps above (approvals), which register them.
                **{name: figures() for name, figures in sorted(sources.items())},
            }
        )
