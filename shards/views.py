"""Thin HTTP views: parse, call one service, render."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from . import leases, metrics, services
from .auth import Principal, shard_scope_check
from .errors import ApiError
from .models import AuditEntry, Shard, ShardType
from .serializers import (
    AuditEntrySerializer,
    AuditQuerySerializer,
    CommitResultSerializer,
    CommitSerializer,
    HistoryEntrySerializer,
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
        responses=ShardPageSerializer,
        operation_id="shards_list",
    )
    def get(self, request: Request) -> Response:
        query = parsed(ShardListQuerySerializer, request.query_params.dict())
        limit = query.get("limit") or settings.ZEROLOCK_PAGE_SIZE
        shards = (
            Shard.objects.of_type(query.get("type", ""))
            .with_prefix(query.get("prefix", ""))
            .within_scopes(request.user.key.shard_prefixes)
        )
        if query.get("after"):
            shards = shards.filter(id__gt=query["after"])
        page = list(shards.order_by("id")[: limit + 1])
        next_url = None
        if len(page) > limit:
            page = page[:limit]
            params = request.query_params.copy()
            params["after"] = page[-1].id
            next_url = request.build_absolute_uri(f"{request.path}?{params.urlencode()}")
        for shard in page:
            shard.value = services.shard_current_value(shard)
        return Response({"results": [shard_data(s) for s in page], "next": next_url})

    @extend_schema(request=ShardCreateSerializer, responses={201: ShardSerializer})
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

    @extend_schema(request=CommitSerializer, responses=CommitResultSerializer)
    def post(self, request: Request, shard_id: str) -> Response:
        with metrics.commit_observed(shard_id):
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

    @extend_schema(responses=HistoryEntrySerializer(many=True))
    def get(self, request: Request, shard_id: str) -> Response:
        shard = services.shard_get(shard_id, payload=False)
        entries = AuditEntry.objects.history_of(shard)
        return Response([history_data(e) for e in entries])


class AuditListView(APIView):
    required_permissions = {"GET": ADMIN}

    @extend_schema(parameters=[AuditQuerySerializer], responses=AuditEntrySerializer(many=True))
    def get(self, request: Request) -> Response:
        query = parsed(AuditQuerySerializer, request.query_params.dict())
        entries = AuditEntry.objects.since(query.get("since")).filter(id__gt=query["after"])
        for field in ("shard_id", "agent_id", "action"):
            if query.get(field):
                entries = entries.filter(**{field: query[field]})
        page = entries.order_by("id")[: query["limit"]]
        return Response([audit_data(e) for e in page])


class TxnView(APIView):
    """Compare-and-set over one or more shards: each operation's shard is checked
    against the key's permissions and scope inside the service."""

    @extend_schema(request=dict, responses=dict)
    def post(self, request: Request) -> Response:
        from .txn import txn_apply

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

        totals = metrics.counters()
        return Response(
            {
                "last_minute": metrics.window(60),
                "last_hour": metrics.window(3600),
                "since_start": {
                    name: totals.get(name, 0)
                    for name in (metrics.COMMITS, metrics.CONFLICTS, metrics.CLAIMS)
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
        return Response(metrics.ws_metrics())


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
        healthy = all(c == "ok" for c in checks.values())
        return Response(
            {"status": "ok" if healthy else "degraded", "checks": checks},
            status=200 if healthy else 503,
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
