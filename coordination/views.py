"""Thin HTTP views: parse, call one service, render."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from access.auth import principal
from access.identity import Principal, sees_values
from common.api import ApiView
from common.inputs import parsed
from common.openapi import CONFLICT, PREFER_PARAMETERS, ErrorEnvelopeSerializer
from common.prefer import Answer, prefer_of, shaped_response, write_shape
from shards.serializers import SHARD_ID_PARAMETER

from . import leases, reservations, sessions
from .claims import task_claim
from .serializers import (
    LEASE_ID_PARAMETER,
    RESERVATION_ID_PARAMETER,
    AgentListSerializer,
    ClaimResultSerializer,
    ClaimSerializer,
    LeaseRequestSerializer,
    ReservationCheckResultSerializer,
    ReservationCheckSerializer,
    ReservationListQuerySerializer,
    ReservationListSerializer,
    ReservationRequestSerializer,
    ReservationSerializer,
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
        return Response(
            {"results": sessions.agents_live(within=principal(request).key.shard_prefixes)}
        )


class TxnView(ApiView):
    """Compare-and-set over one or more shards: each operation's shard is checked
    against the key's permissions and scope inside the service."""

    @extend_schema(
        request=TxnSerializer, responses={200: dict, 409: CONFLICT}, parameters=PREFER_PARAMETERS
    )
    def post(self, request: Request) -> Response:
        return shaped_response(
            *txn_answer(principal(request), request.data, prefer=prefer_of(request))
        )


def txn_answer(who: Principal, data: Any, *, prefer: str) -> Answer:
    """``POST /api/txn``'s answer: the view's, and the straight call's."""
    result = txn_apply(actor=who.actor, key=who.key, body=data)
    # Minimal: the outcome and the versions written, not what the ops read.
    return write_shape(result, prefer=prefer, omit=("responses",))


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
        return shaped_response(
            *claim_answer(principal(request), shard_id, request.data, prefer=prefer_of(request))
        )


def claim_answer(who: Principal, shard_id: str, data: Any, *, prefer: str) -> Answer:
    """``POST /api/shards/{id}/claim``'s answer to the parsed body ``data``: the
    view's, and the direct lane's straight call's (zerolock_site/direct.py)."""
    checked = parsed(ClaimSerializer, data)
    claim = task_claim(
        actor=who.actor,
        shard_id=shard_id,
        where=checked["where"],
        set_fields=checked["set"],
        lease_id=checked.get("lease_id"),
        fence=checked.get("fence"),
    )
    return write_shape(claim.as_dict(), prefer=prefer, shown=sees_values(who.key))


class LeaseListView(ApiView):
    required_permissions = {"POST": WRITE}

    @extend_schema(request=LeaseRequestSerializer, responses={201: dict, 409: CONFLICT})
    def post(self, request: Request) -> Response:
        return Response(lease_grant_answer(principal(request), request.data), status=201)


def lease_grant_answer(who: Principal, data: Any) -> dict[str, Any]:
    """``POST /api/leases``'s answer (201): the view's, and the straight call's."""
    body = data if isinstance(data, dict) else {}
    lease = leases.lease_grant(
        holder=who.agent_id,
        key_prefix=who.key.prefix,
        ttl_seconds=body.get("ttl_seconds"),
        session=body.get("session"),
    )
    return leases.lease_data(lease)


class LeaseDetailView(ApiView):
    required_permissions = {"DELETE": WRITE}

    @extend_schema(
        responses={204: OpenApiResponse(description="Revoked")}, parameters=[LEASE_ID_PARAMETER]
    )
    def delete(self, request: Request, lease_id: str) -> Response:
        lease_revoke_answer(principal(request), lease_id)
        return Response(status=204)


def lease_revoke_answer(who: Principal, lease_id: str) -> None:
    """``DELETE /api/leases/{id}`` (204, no body): the view's, and the straight call's."""
    leases.lease_revoke(lease_id=lease_id, holder=who.agent_id, key_prefix=who.key.prefix)


class LeaseKeepAliveView(ApiView):
    required_permissions = {"POST": WRITE}

    @extend_schema(request=None, responses=dict, parameters=[LEASE_ID_PARAMETER])
    def post(self, request: Request, lease_id: str) -> Response:
        return Response(lease_keepalive_answer(principal(request), lease_id))


def lease_keepalive_answer(who: Principal, lease_id: str) -> dict[str, Any]:
    """``POST /api/leases/{id}/keepalive``'s answer: the view's, and the straight call's."""
    lease = leases.lease_keepalive(
        lease_id=lease_id, holder=who.agent_id, key_prefix=who.key.prefix
    )
    return leases.lease_data(lease)


RESERVATION_CONFLICT = OpenApiResponse(
    ErrorEnvelopeSerializer,
    description="RESERVATION_CONFLICT: a pattern overlaps another agent's reservation; "
    "`conflicts` lists each (holder, patterns, expires_at, the overlapping pattern and a "
    "path both match). Or TOO_MANY_RESERVATIONS: the key already holds "
    "ZEROLOCK_MAX_RESERVATIONS_PER_KEY live reservations (`limit`). Or LEASE_NOT_FOUND (404) "
    "for a lease_id that is not live.",
)
RESERVATION_TOO_COSTLY = OpenApiResponse(
    ErrorEnvelopeSerializer,
    description="VALIDATION_ERROR, or RESERVATION_TOO_COSTLY: comparing the patterns or paths "
    "with the live reservations would spend more than ZEROLOCK_RESERVATION_BUDGET_STEPS "
    "(`budget_steps`); nothing is written.",
)


def _agent(request: Request) -> reservations.Agent:
    return reservations.Agent(
        agent_id=principal(request).agent_id, key_prefix=principal(request).key.prefix
    )


class ReservationListView(ApiView):
    """Path reservations: globs an agent is working on; an exclusive one refuses
    every other agent's overlapping pattern."""

    required_permissions = {"GET": READ, "POST": WRITE}

    @extend_schema(
        parameters=[ReservationListQuerySerializer],
        responses={200: ReservationListSerializer, 400: RESERVATION_TOO_COSTLY},
        operation_id="reservations_list",
    )
    def get(self, request: Request) -> Response:
        query = request.query_params
        return Response(
            reservations.reservations_list(holder=query.get("holder"), path=query.get("path"))
        )

    @extend_schema(
        request=ReservationRequestSerializer,
        responses={
            201: ReservationSerializer,
            400: RESERVATION_TOO_COSTLY,
            409: RESERVATION_CONFLICT,
        },
    )
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else {}
        reservation = reservations.reservation_create(
            agent=_agent(request),
            patterns=body.get("patterns"),
            exclusive=body.get("exclusive"),
            ttl_seconds=body.get("ttl_seconds"),
            reason=body.get("reason"),
            lease_id=body.get("lease_id"),
        )
        return Response(reservations.reservation_data(reservation), status=201)


class ReservationCheckView(ApiView):
    """Which of these paths fall in another agent's exclusive reservation: what a
    pre-commit hook (``zerolock guard``) asks before this agent commits them."""

    required_permissions = {"POST": READ}

    @extend_schema(
        request=ReservationCheckSerializer,
        responses={200: ReservationCheckResultSerializer, 400: RESERVATION_TOO_COSTLY},
        operation_id="reservations_check",
    )
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else {}
        return Response(
            reservations.reservations_check(agent=_agent(request), paths=body.get("paths"))
        )


class ReservationDetailView(ApiView):
    required_permissions = {"DELETE": WRITE}

    @extend_schema(
        responses={204: OpenApiResponse(description="Released")},
        parameters=[RESERVATION_ID_PARAMETER],
    )
    def delete(self, request: Request, reservation_id: str) -> Response:
        reservations.reservation_release(
            agent=_agent(request),
            reservation_id=reservation_id,
            admin=principal(request).key.has_permission("admin"),
        )
        return Response(status=204)


class ReservationKeepAliveView(ApiView):
    required_permissions = {"POST": WRITE}

    @extend_schema(
        request=None, responses=ReservationSerializer, parameters=[RESERVATION_ID_PARAMETER]
    )
    def post(self, request: Request, reservation_id: str) -> Response:
        reservation = reservations.reservation_keepalive(
            agent=_agent(request), reservation_id=reservation_id
        )
        return Response(reservations.reservation_data(reservation))
