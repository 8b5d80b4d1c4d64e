"""GET /api/audit: the audit log as a key may see it (scoped keys see only
their shards). Here, not in the audit app, because it needs the key."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request

from access.auth import principal
from audit.models import AuditEntry
from audit.serializers import AuditEntrySerializer, AuditQuerySerializer, audit_data
from common import pages
from common.api import ApiView
from common.inputs import parsed

ADMIN = "admin"


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
