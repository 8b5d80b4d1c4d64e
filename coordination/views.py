"""Thin HTTP views: parse, call one service, render."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from access.auth import principal
from access.identity import sees_values
from common.api import ApiView
from common.inputs import parsed
from common.openapi import CONFLICT, PREFER_PARAMETERS, ErrorEnvelopeSerializer
from common.prefer import write_answer
from shards.serializers import SHARD_ID_PARAMETER

from . import leases, sessions
from .claims import task_claim
from .serializers import (
    LEASE_ID_PARAMETER,
    AgentListSerializer,
    ClaimResultSerializer,
    ClaimSerializer,
    LeaseRequestSerializer,
    TxnSerializer,
)
from .txn import txn_apply

WRITE, READ = "shard:write", "shard:read"


class AgentListView(ApiView):
    """Presence: the agents connected now, over every server process."""

    required_permissions = {"GET": READ}

    @extend_schema(
        responses=OpenApiResponse(
            AgentListSerializer,
            description="Every agent with an open /ws/agents/ socket, by key and agent id.",
        ),
        operation_id="agents_list",
    )
    def get(self, request: Request) -> Response:
        return Response({"results": sessions.agents_live()})


class TxnView(ApiView):
    """Compare-and-set over one or more shards: each operation's shard is checked
    against the key's permissions and scope inside the service."""

    @extend_schema(
        request=TxnSerializer, responses={200: dict, 409: CONFLICT}, parameters=PREFER_PARAMETERS
    )
    def post(self, request: Request) -> Response:
        result = txn_apply(
            actor=principal(request).actor, key=principal(request).key, body=request.data
        )
        # Minimal: the outcome and the versions written, not what the ops read.
        return write_answer(request, result, omit=("responses",))


NOTHING_TO_CLAIM = OpenApiResponse(
    ErrorEnvelopeSerializer,
    description="NOTHING_TO_CLAIM: no task matches `where` (or SHARD_NOT_FOUND, "
    "LEASE_NOT_FOUND; see the code).",
)


class ClaimView(ApiView):
    """Claims one task of a queue (a decision shard whose value is an object of
    tasks): the server picks a task whose fields equal `where`, sets `set` and
    `holder` (the acting agent) on it in one versioned write, and answers with it;
    404 NOTHING_TO_CLAIM when no task matches."""

    required_permissions = {"POST": WRITE}

    @extend_schema(
        request=ClaimSerializer,
        responses={200: ClaimResultSerializer, 404: NOTHING_TO_CLAIM, 409: CONFLICT},
        parameters=[*PREFER_PARAMETERS, SHARD_ID_PARAMETER],
    )
    def post(self, request: Request, shard_id: str) -> Response:
        data = parsed(ClaimSerializer, request.data)
        claim = task_claim(
            actor=principal(request).actor,
            shard_id=shard_id,
            where=data["where"],
            set_fields=data["set"],
            lease_id=data.get("lease_id"),
            fence=data.get("fence"),
        )
        return write_answer(request, claim.as_dict(), shown=sees_values(principal(request).key))


class LeaseListView(ApiView):
    required_permissions = {"POST": WRITE}

    @extend_schema(request=LeaseRequestSerializer, responses={201: dict, 409: CONFLICT})
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else {}
        lease = leases.lease_grant(
            holder=principal(request).agent_id,
            key_prefix=principal(request).key.prefix,
            ttl_seconds=body.get("ttl_seconds"),
            session=body.get("session"),
        )
        return Response(leases.lease_data(lease), status=201)


class LeaseDetailView(ApiView):
    required_permissions = {"DELETE": WRITE}

    @extend_schema(
        responses={204: OpenApiResponse(description="Revoked")}, parameters=[LEASE_ID_PARAMETER]
    )
    def delete(self, request: Request, lease_id: str) -> Response:
        leases.lease_revoke(
            lease_id=lease_id,
            holder=principal(request).agent_id,
            key_prefix=principal(request).key.prefix,
        )
        return Response(status=204)


class LeaseKeepAliveView(ApiView):
    required_permissions = {"POST": WRITE}

    @extend_schema(request=None, responses=dict, parameters=[LEASE_ID_PARAMETER])
    def post(self, request: Request, lease_id: str) -> Response:
        lease = leases.lease_keepalive(
            lease_id=lease_id,
            holder=principal(request).agent_id,
            key_prefix=principal(request).key.prefix,
        )
        return Response(leases.lease_data(lease))
