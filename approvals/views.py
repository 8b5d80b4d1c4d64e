"""Thin views for /api/approvals: parse, call one service or selector, render."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from access.auth import principal, scope_check, sees_values
from common.api import ApiView
from common.inputs import parsed
from common.openapi import CONFLICT, ErrorEnvelopeSerializer

from . import selectors, services
from .models import APPROVAL_ID_REGEX, Approval
from .selectors import ApprovalNow, approval_now, at_request
from .serializers import (
    ApprovalListQuerySerializer,
    ApprovalPageSerializer,
    ApprovalRequestSerializer,
    ApprovalSerializer,
    DecisionSerializer,
    RejectionSerializer,
    approval_data,
)

READ, REQUEST, DECIDE = "shard:read", "approval:request", "approval:decide"

APPROVAL_ID_PARAMETER = OpenApiParameter(
    "approval_id", OpenApiTypes.STR, OpenApiParameter.PATH, pattern=APPROVAL_ID_REGEX
)
# GET /api/approvals/request is the request endpoint, which takes POST only.
REQUEST_IS_NOT_AN_ID = OpenApiResponse(
    ErrorEnvelopeSerializer,
    description="METHOD_NOT_ALLOWED, for approval_id `request` only: that path is "
    "POST /api/approvals/request (`Allow: POST`). Approval ids are `apr_` and 24 hex digits.",
)


def visible_approval(request: Request, approval_id: str) -> Approval:
    approval = selectors.approval_get(approval_id)
    scope_check(principal(request).key, [approval.shard_id])
    return approval


class ApprovalRequestView(ApiView):
    required_permissions = {"POST": REQUEST}

    @extend_schema(request=ApprovalRequestSerializer, responses={201: ApprovalSerializer})
    def post(self, request: Request) -> Response:
        data = parsed(ApprovalRequestSerializer, request.data)
        who = principal(request)
        scope_check(who.key, [data["shard_id"]])
        approval = services.approval_request(actor=who.actor, key_name=who.key.name, **data)
        # The shard as the request saw it: the answer is built from what was
        # stored and computes nothing that could fail after the store.
        read = ApprovalNow(approval, at_request(approval))
        return Response(approval_data(read, sees_values=sees_values(who.key)), status=201)


class ApprovalListView(ApiView):
    required_permissions = {"GET": READ}

    @extend_schema(parameters=[ApprovalListQuerySerializer], responses=ApprovalPageSerializer)
    def get(self, request: Request) -> Response:
        query = parsed(ApprovalListQuerySerializer, request.query_params.dict())
        limit = query.get("limit") or settings.ZEROLOCK_PAGE_SIZE
        start = (query["page"] - 1) * limit
        approvals = selectors.approvals_listed(
            status=query.get("status", ""),
            shard_id=query.get("shard_id", ""),
            requested_by=query.get("requested_by", ""),
            scopes=principal(request).key.shard_prefixes,
        )
        page = list(approvals[start : start + limit + 1])
        next_url = None
        if len(page) > limit:
            page = page[:limit]
            params = request.query_params.copy()
            params["page"] = str(query["page"] + 1)
            next_url = request.build_absolute_uri(f"{request.path}?{params.urlencode()}")
        results = [approval_data(ApprovalNow.of(a), listed=True) for a in page]
        return Response({"results": results, "next": next_url})


class ApprovalDetailView(ApiView):
    required_permissions = {"GET": READ}

    @extend_schema(
        responses={200: ApprovalSerializer, 405: REQUEST_IS_NOT_AN_ID},
        parameters=[APPROVAL_ID_PARAMETER],
    )
    def get(self, request: Request, approval_id: str) -> Response:
        approval = visible_approval(request, approval_id)
        return Response(approval_data(approval_now(approval)))


class ApprovalDecideView(ApiView):
    required_permissions = {"POST": DECIDE}
    approve = True

    @extend_schema(
        request=DecisionSerializer,
        responses={200: ApprovalSerializer, 409: CONFLICT},
        parameters=[APPROVAL_ID_PARAMETER],
    )
    def post(self, request: Request, approval_id: str) -> Response:
        data = parsed(DecisionSerializer, request.data if request.data else {})
        visible_approval(request, approval_id)
        approval = services.approval_decide(
            approval_id=approval_id,
            decider=services.Decider.agent(
                principal(request).actor, user_id=principal(request).key.user_id
            ),
            approve=self.approve,
            reason=data["reason"],
        )
        shown = sees_values(principal(request).key)
        return Response(approval_data(approval_now(approval), sees_values=shown))


class ApprovalRejectView(ApprovalDecideView):
    approve = False

    @extend_schema(
        request=RejectionSerializer,
        responses={200: ApprovalSerializer, 409: CONFLICT},
        parameters=[APPROVAL_ID_PARAMETER],
    )
    def post(self, request: Request, approval_id: str) -> Response:
        return super().post(request, approval_id)
