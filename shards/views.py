"""Thin HTTP views: parse, call one service, render."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from access.auth import Principal, principal, scope_check
from access.identity import sees_values
from audit.models import AuditEntry
from common import pages
from common.api import ApiView
from common.errors import Invalid
from common.inputs import parsed
from common.openapi import CONFLICT, PREFER_PARAMETERS
from common.prefer import prefer_of, shaped_response, write_shape
from shards import services
from shards.models import Shard, ShardType

from .serializers import (
    SHARD_ID_PARAMETER,
    CommitResultSerializer,
    CommitSerializer,
    HistoryEntrySerializer,
    HistoryQuerySerializer,
    ShardCreateSerializer,
    ShardListQuerySerializer,
    ShardPageSerializer,
    ShardSerializer,
    history_data,
    shard_data,
)

READ, WRITE, CREATE, ADMIN = "shard:read", "shard:write", "shard:create", "admin"


class ShardListView(ApiView):
    required_permissions = {"GET": READ, "POST": CREATE}

    @extend_schema(
        parameters=[ShardListQuerySerializer],
        responses=OpenApiResponse(
            ShardPageSerializer,
            description="Ordered by id. A page ends at `limit` shards or earlier, when its "
            "JSON would pass ZEROLOCK_LIST_MAX_BYTES; `next` continues it (null at the end).",
        ),
        operation_id="shards_list",
    )
    def get(self, request: Request) -> HttpResponse:
        query = parsed(ShardListQuerySerializer, request.query_params.dict())
        limit = query.get("limit") or settings.ZEROLOCK_PAGE_SIZE
        shards = (
            Shard.objects.of_type(query.get("type", ""))
            .with_prefix(query.get("prefix", ""))
            .within_scopes(principal(request).key.shard_prefixes)
        )
        if query.get("after"):
            shards = shards.filter(id__gt=query["after"])
        rows = shards.order_by("id")[: limit + 1].iterator(chunk_size=pages.FETCH_CHUNK)
        page = pages.page_collect(rows, _listed_shard, limit=limit)
        next_url = None
        if page.more:
            next_url = pages.next_url(request, "after", page.last.id)
        return pages.json_response(
            b'{"results":' + page.json_list() + b',"next":' + pages.encode(next_url) + b"}"
        )

    @extend_schema(request=ShardCreateSerializer, responses={201: ShardSerializer, 409: CONFLICT})
    def post(self, request: Request) -> Response:
        data = parsed(ShardCreateSerializer, request.data)
        scope_check(principal(request).key, [data["id"]])
        shard = services.shard_create(
            actor=principal(request).actor,
            shard_id=data["id"],
            shard_type=data["type"],
            crdt_type=data.get("crdt_type"),
            initial_value=data["initial_value"],
            reversible=data["reversible"],
            approvals_required=data["approvals_required"],
            value_schema=data["value_schema"],
            owner_policy=data["owner_policy"],
            owners=data["owners"],
        )
        return Response(shard_data(shard), status=201)


def _listed_shard(shard: Shard) -> dict[str, Any]:
    shard.value = services.shard_current_value(shard)
    return shard_data(shard)


class ShardDetailView(ApiView):
    required_permissions = {"GET": READ, "DELETE": ADMIN}

    @extend_schema(
        responses=ShardSerializer, operation_id="shards_get", parameters=[SHARD_ID_PARAMETER]
    )
    def get(self, request: Request, shard_id: str) -> Response:
        return Response(shard_read_answer(principal(request), shard_id))

    @extend_schema(
        responses={204: OpenApiResponse(description="Deleted")}, parameters=[SHARD_ID_PARAMETER]
    )
    def delete(self, request: Request, shard_id: str) -> Response:
        services.shard_delete(actor=principal(request).actor, shard_id=shard_id)
        return Response(status=204)


class ShardCommitView(ApiView):
    required_permissions = {"POST": WRITE}

    @extend_schema(
        request=CommitSerializer,
        responses={200: CommitResultSerializer, 409: CONFLICT},
        parameters=[*PREFER_PARAMETERS, SHARD_ID_PARAMETER],
    )
    def post(self, request: Request, shard_id: str) -> Response:
        body, headers = shard_commit_answer(
            principal(request), shard_id, request.data, prefer=prefer_of(request)
        )
        return shaped_response(body, headers)


def shard_read_answer(who: Principal, shard_id: str) -> dict[str, Any]:
    """``GET /api/shards/{id}``'s answer: the view's, and the direct lane's
    straight call's (zerolock_site/direct.py)."""
    return shard_data(services.shard_read(shard_id=shard_id, reader=who.reader))


def shard_commit_answer(
    who: Principal, shard_id: str, data: Any, *, prefer: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """``POST /api/shards/{id}/commit``'s answer (body and headers) to the parsed
    request body ``data``: the view's, and the direct lane's straight call's."""
    shard = services.shard_get(shard_id, payload=False)
    if shard.type == ShardType.ADDITIVE:
        if not isinstance(data, dict):
            raise Invalid("Expected a JSON object.")
        result = services.additive_commit(actor=who.actor, shard=shard, body=data)
        return write_shape(result.as_dict(), prefer=prefer, shown=sees_values(who.key))
    checked = parsed(CommitSerializer, data)
    # The read set names other shards: each must be inside the key's scopes
    # (as the shard in the path is), before anything about them is read.
    scope_check(who.key, checked["read_set"])
    result = services.shard_commit(
        actor=who.actor,
        shard=shard,
        expected_version=checked["expected_version"],
        new_value=checked["new_value"],
        read_set=checked["read_set"],
        approval_id=checked.get("approval_id"),
        fence=checked.get("fence"),
    )
    return write_shape(result.as_dict(), prefer=prefer, shown=sees_values(who.key))


class ShardHistoryView(ApiView):
    required_permissions = {"GET": READ}

    @extend_schema(
        parameters=[HistoryQuerySerializer, SHARD_ID_PARAMETER],
        responses={
            200: OpenApiResponse(
                HistoryEntrySerializer(many=True),
                description="Oldest first. A list cut short by ZEROLOCK_LIST_MAX_BYTES "
                'carries `Link: <url>; rel="next"` (the same query from a later version).',
            )
        },
    )
    def get(self, request: Request, shard_id: str) -> HttpResponse:
        query = parsed(HistoryQuerySerializer, request.query_params.dict())
        shard = services.shard_get(shard_id, payload=False)
        entries = AuditEntry.objects.history_of(shard).filter(version_after__gt=query["after"])
        rows = entries.iterator(chunk_size=pages.FETCH_CHUNK)
        page = pages.page_collect(rows, history_data, limit=None)
        last = page.last.version_after if page.last else None
        return pages.list_response(request, page, "after", last)
