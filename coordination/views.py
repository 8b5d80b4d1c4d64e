"""Thin HTTP views: parse, call one service, render."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.auth import principal
from common.openapi import CONFLICT

from . import leases
from .txn import txn_apply

WRITE = "shard:write"


class TxnView(APIView):
    """Compare-and-set over one or more shards: each operation's shard is checked
    against the key's permissions and scope inside the service."""

    @extend_schema(request=dict, responses={200: dict, 409: CONFLICT})
    def post(self, request: Request) -> Response:
        return Response(
            txn_apply(actor=principal(request).actor, key=principal(request).key, body=request.data)
        )


class LeaseListView(APIView):
    required_permissions = {"POST": WRITE}

    @extend_schema(request=dict, responses={201: dict})
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else {}
        lease = leases.lease_grant(
            holder=principal(request).agent_id,
            key_prefix=principal(request).key.prefix,
            ttl_seconds=body.get("ttl_seconds"),
        )
        return Response(leases.lease_data(lease), status=201)


class LeaseDetailView(APIView):
    required_permissions = {"DELETE": WRITE}

    @extend_schema(responses={204: OpenApiResponse(description="Revoked")})
    def delete(self, request: Request, lease_id: str) -> Response:
        leases.lease_revoke(
            lease_id=lease_id,
            holder=principal(request).agent_id,
            key_prefix=principal(request).key.prefix,
        )
        return Response(status=204)


class LeaseKeepAliveView(APIView):
    required_permissions = {"POST": WRITE}

    @extend_schema(request=None, responses=dict)
    def post(self, request: Request, lease_id: str) -> Response:
        lease = leases.lease_keepalive(
            lease_id=lease_id,
            holder=principal(request).agent_id,
            key_prefix=principal(request).key.prefix,
        )
        return Response(leases.lease_data(lease))
