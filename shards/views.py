"""Thin HTTP views: parse, call one service, render."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.auth import Principal, shard_scope_check
from audit.models import AuditEntry
from common import pages
from common.errors import ApiError
from coordination import leases
from metrics import record
from shards import services
from shards.models import Shard, ShardType
from zerolock_site.openapi import CONFLICT

from .serializers import (
    AuditEntrySerializer,
    AuditQuerySerializer,
    CommitResultSerializer,
    CommitSerializer,
    HistoryEntrySerializer,
    HistoryQuerySerializer,
    ShardCreateSerializer,
    ShardListQuerySerializer,
    ShardPageSerializer,
    ShardSerializer,
    audit_data,
    history_data,
    shard_data,
)

READ, WRITE, CREATE, ADMIN = "shard:read", "shard:write", "shard:create", "admin"


def actor_of(request: Request) -> services.Actor:
    principal: Principal = request.user
    return services.Actor(agent_id=principal.agent_id, key_prefix=principal.key.prefix)


def reader_of(request: Request) -> str:
    principal: Principal = request.user
    return principal.agent_id or f"key:{principal.key.prefix}"


def parsed(serializer_class: type, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ApiError(400, "VALIDATION_ERROR", "Expected a JSON object.")
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class ShardListView(APIView):
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
            .within_scopes(request.user.key.shard_prefixes)
        )
        if query.get("after"):
            shards = shards.filter(id__gt=query["after"])
        rows = shards.order_by("id")[: limit + 1].iterator(chunk_size=pages.FETCH_CHUNK)
        page = pages.page_collect(rows, _listed_shard, limit=limit)
        next_url = None
        if page.more:
            next_url = _next_url(request, "after", page.last.id)
        return pages.json_response(
            b'{"results":' + page.json_list() + b',"next":' + pages.encode(next_url) + b"}"
        )

    @extend_schema(request=ShardCreateSerializer, responses={201: ShardSerializer, 409: CONFLICT})
    def post(self, request: Request) -> Response:
        data = parsed(ShardCreateSerializer, request.data)
        shard_scope_check(request.user, data["id"])
        shard = services.shard_create(
            actor=actor_of(request),
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


def _next_url(request: Request, param: str, value: Any) -> str:
    params = request.query_params.copy()
    params[param] = str(value)
    return request.build_absolute_uri(f"{request.path}?{params.urlencode()}")


def _list_response(request: Request, page: pages.Page, param: str, value: Any) -> HttpResponse:
    """A bare JSON list (the contract's shape); a cut-short list says where it
    goes on in a ``Link: <url>; rel="next"`` header."""
    response = pages.json_response(page.json_list())
    if page.more:
        response["Link"] = f'<{_next_url(request, param, value)}>; rel="next"'
    return response


class ShardDetailView(APIView):
    required_permissions = {"GET": READ, "DELETE": ADMIN}

    @extend_schema(responses=ShardSerializer, operation_id="shards_get")
    def get(self, request: Request, shard_id: str) -> Response:
        shard = services.shard_read(shard_id=shard_id, reader=reader_of(request))
        return Response(shard_data(shard))

    @extend_schema(responses={204: OpenApiResponse(description="Deleted")})
    def delete(self, request: Request, shard_id: str) -> Response:
        services.shard_delete(actor=actor_of(request), shard_id=shard_id)
        return Response(status=204)


class ShardCommitView(APIView):
    required_permissions = {"POST": WRITE}

    @extend_schema(request=CommitSerializer, responses={200: CommitResultSerializer, 409: CONFLICT})
    def post(self, request: Request, shard_id: str) -> Response:
        with record.commit_observed(shard_id):
            return self._commit(request, shard_id)

    def _commit(self, request: Request, shard_id: str) -> Response:
        shard = services.shard_get(shard_id, payload=False)
        if shard.type == ShardType.ADDITIVE:
            if not isinstance(request.data, dict):
                raise ApiError(400, "VALIDATION_ERROR", "Expected a JSON object.")
            result = services.additive_commit(
                actor=actor_of(request), shard=shard, body=request.data
            )
            return Response(result.as_dict())
        data = parsed(CommitSerializer, request.data)
        result = services.shard_commit(
            actor=actor_of(request),
            shard=shard,
            expected_version=data["expected_version"],
            new_value=data["new_value"],
            read_set=data["read_set"],
            approval_id=data.get("approval_id"),
            fence=data.get("fence"),
        )
        return Response(result.as_dict())


class ShardHistoryView(APIView):
    required_permissions = {"GET": READ}

    @extend_schema(
        parameters=[HistoryQuerySerializer],
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
        return _list_response(request, page, "after", last)


class AuditListView(APIView):
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
            AuditEntry.objects.within_scopes(request.user.key.shard_prefixes)
            .since(query.get("since"))
            .filter(id__gt=query["after"])
        )
        for field in ("shard_id", "agent_id", "action"):
            if query.get(field):
                entries = entries.filter(**{field: query[field]})
        limit = query["limit"]
        rows = entries.order_by("id")[: limit + 1].iterator(chunk_size=pages.FETCH_CHUNK)
        page = pages.page_collect(rows, audit_data, limit=limit)
        return _list_response(request, page, "after", page.last.pk if page.last else None)


class TxnView(APIView):
    """Compare-and-set over one or more shards: each operation's shard is checked
    against the key's permissions and scope inside the service."""

    @extend_schema(request=dict, responses={200: dict, 409: CONFLICT})
    def post(self, request: Request) -> Response:
        from coordination.txn import txn_apply

        return Response(txn_apply(actor=actor_of(request), key=request.user.key, body=request.data))


class LeaseListView(APIView):
    required_permissions = {"POST": WRITE}

    @extend_schema(request=dict, responses={201: dict})
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else {}
        lease = leases.lease_grant(
            holder=request.user.agent_id,
            key_prefix=request.user.key.prefix,
            ttl_seconds=body.get("ttl_seconds"),
        )
        return Response(leases.lease_data(lease), status=201)


class LeaseDetailView(APIView):
    required_permissions = {"DELETE": WRITE}

    @extend_schema(responses={204: OpenApiResponse(description="Revoked")})
    def delete(self, request: Request, lease_id: str) -> Response:
        leases.lease_revoke(
            lease_id=lease_id, holder=request.user.agent_id, key_prefix=request.user.key.prefix
        )
        return Response(status=204)


class LeaseKeepAliveView(APIView):
    required_permissions = {"POST": WRITE}

    @extend_schema(request=None, responses=dict)
    def post(self, request: Request, lease_id: str) -> Response:
        lease = leases.lease_keepalive(
            lease_id=lease_id, holder=request.user.agent_id, key_prefix=request.user.key.prefix
        )
        return Response(leases.lease_data(lease))


class MetricsView(APIView):
    """Commits, conflicts, claims and approvals over the last minute, the last hour
    and since the database began; latency percentiles; the hottest shards."""

    required_permissions = {"GET": READ}

    @extend_schema(responses=dict)
    def get(self, request: Request) -> Response:
        from approvals.models import Approval, ApprovalStatus

        totals = record.counters()
        return Response(
            {
                "last_minute": record.window(60),
                "last_hour": record.window(3600),
                "since_start": {
                    name: totals.get(name, 0)
                    for name in (record.COMMITS, record.CONFLICTS, record.CLAIMS)
                },
                "approvals": {
                    status: Approval.objects.with_status(status).count()
                    for status in ApprovalStatus.values
                },
            }
        )


class WsMetricsView(APIView):
    required_permissions = {"GET": READ}

    @extend_schema(responses=dict)
    def get(self, request: Request) -> Response:
        return Response(record.ws_metrics())


class HealthView(APIView):
    """Unauthenticated, so load balancers can probe it; it reveals only up/down."""

    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(responses={200: dict, 503: dict})
    def get(self, request: Request) -> Response:
        checks = {
            "database": _check(lambda: connection.ensure_connection()),
            "channel_layer": _check(_ping_channel_layer),
            "broker": _check(_ping_broker),
        }
        serving = all(c == "ok" for c in checks.values())
        roles = _celery_roles() if checks["database"] == "ok" else {}
        checks.update({role: health["status"] for role, health in roles.items()})
        healthy = all(c == "ok" for c in checks.values())
        # A missing worker or beat is "degraded" but still 200: this node serves
        # HTTP and WebSockets, and a load balancer must keep it (expiry also runs
        # in-process and at decision time). 503 only when it cannot serve.
        return Response(
            {"status": "ok" if healthy else "degraded", "checks": checks, **roles},
            status=200 if serving else 503,
        )


def _check(probe: Any) -> str:
    try:
        probe()
    except Exception as exc:  # a health probe reports every failure, whatever its type
        return f"error: {type(exc).__name__}"
    return "ok"


def _ping_channel_layer() -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured")
    # A send to a group nobody joined reaches the backend but stores nothing.
    async_to_sync(layer.group_send)("health-probe", {"type": "health.probe"})


def _ping_broker() -> None:
    from zerolock_site.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        # Connecting alone touches nothing on the embedded (virtual) transport;
        # sizing the task queue reads the broker's storage on every transport.
        conn.default_channel.queue_declare(queue=app.conf.task_default_queue)


def _celery_roles() -> dict[str, dict[str, Any]]:
    from supervision.heartbeats import heartbeat_health
    from supervision.models import Role

    try:
        return {role.value: health.as_dict() for role, health in heartbeat_health().items()}
    except Exception as exc:  # a health probe reports every failure, whatever its type
        failed = {"status": f"error: {type(exc).__name__}", "last_heartbeat_seconds_ago": None}
        return {role.value: failed for role in Role}
