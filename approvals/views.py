"""Thin views for /api/approvals: parse, call one service or selector, render."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from access.auth import principal, scope_check
from access.identity import sees_values
from common import pages
from common.api import ApiView
from common.inputs import parsed
from common.openapi import CONFLICT, ErrorEnvelopeSerializer

from . import selectors, services
from .models import APPROVAL_ID_REGEX, Approval, ApprovalQuerySet
from .selectors import ApprovalNow, approval_now, at_request
from .serializers import (
    PAGE_MAX,
    ApprovalDecisionRequestSerializer,
    ApprovalListQuerySerializer,
    ApprovalPageSerializer,
    ApprovalRequestSerializer,
    ApprovalSerializer,
    ChangesRequestSerializer,
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

# The page-number form of GET /api/approvals (``?page=``) is deprecated since
# this day: its answers say so (RFC 9745) and link the same page in the keyset
# form. It is taken until a later release removes it.
PAGE_DEPRECATED_AT = datetime(2026, 12, 2, tzinfo=UTC)
PAGE_PARAMETER = OpenApiParameter(
    "page",
    {"type": "integer", "format": "int64", "minimum": 1, "maximum": PAGE_MAX},
    OpenApiParameter.QUERY,
    deprecated=True,
    description="Deprecated: follow `next` (the keyset form, `after`). A page number "
    "(limit-sized pages, newest first); ignored beside `after`.",
)
DEPRECATION_HEADERS = [
    OpenApiParameter(
        "Deprecation",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200],
        description="With `page` only: `@<unix time>` (RFC 9745), when the page-number "
        "form was deprecated.",
    ),
    OpenApiParameter(
        "Link",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200],
        description='With `page` only: `<URL>; rel="successor-version"`, the same page '
        "in the keyset form.",
    ),
]


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

    @extend_schema(
        parameters=[ApprovalListQuerySerializer, PAGE_PARAMETER, *DEPRECATION_HEADERS],
        responses=OpenApiResponse(
            ApprovalPageSerializer,
            description="Newest first. A page ends at `limit` approvals or earlier, when its "
            "JSON would pass ZEROLOCK_LIST_MAX_BYTES; `next` continues it (null at the end).",
        ),
    )
    def get(self, request: Request) -> HttpResponse:
        query = parsed(ApprovalListQuerySerializer, request.query_params.dict())
        limit = query.get("limit") or settings.ZEROLOCK_PAGE_SIZE
        approvals = selectors.approvals_listed(
            status=query.get("status", ""),
            shard_id=query.get("shard_id", ""),
            requested_by=query.get("requested_by", ""),
            scopes=principal(request).key.shard_prefixes,
        )
        number = query.get("page") if "after" not in query else None
        if "after" in query:
            approvals = approvals.older_than(*selectors.cursor_parse(query["after"]))
        start = (number - 1) * limit if number else 0
        found, rows = selectors.listed(approvals, start=start, count=limit + 1)
        page = pages.page_collect(rows, _listed, limit=limit)
        next_url = None
        # More were found than the page holds (a row deleted since is not the end).
        if page.last is not None and (page.more or found > len(page.parts)):
            last = page.last.read.approval
            cursor = selectors.cursor_of(last.created_at, last.id)
            next_url = pages.next_url(request, "after", cursor, drop=("page",))
        response = pages.json_response(
            b'{"results":' + page.json_list() + b',"next":' + pages.encode(next_url) + b"}"
        )
        if number is not None:
            _deprecated_page(request, response, approvals, start)
        return response


def _listed(row: selectors.Listed) -> dict[str, Any]:
    return approval_data(row.read, listed=True, decisions=row.decisions)


def _deprecated_page(
    request: Request, response: HttpResponse, approvals: ApprovalQuerySet, start: int
) -> None:
    """Marks an answer to ``?page=`` deprecated and links its successor: the same
    page in the keyset form, which starts after the approval before it."""
    before = None
    if start:
        cursors = approvals.values_list("created_at", "id")
        # Past the end, the page is empty, as it is after the last approval.
        before = cursors[start - 1 : start].first() or cursors.last()
    keyset = {"after": selectors.cursor_of(*before)} if before else {}
    successor = pages.url_with(request, drop=("page", "after"), **keyset)
    response["Deprecation"] = f"@{int(PAGE_DEPRECATED_AT.timestamp())}"
    response["Link"] = f'<{successor}>; rel="successor-version"'


class ApprovalDetailView(ApiView):
    required_permissions = {"GET": READ}

    @extend_schema(
        responses={200: ApprovalSerializer, 405: REQUEST_IS_NOT_AN_ID},
        parameters=[APPROVAL_ID_PARAMETER],
    )
    def get(self, request: Request, approval_id: str) -> Response:
        approval = visible_approval(request, approval_id)
        return Response(approval_data(approval_now(approval)))


def _decided(request: Request, approval_id: str, **decision: Any) -> Response:
    """One decision by the calling key (``services.approval_decide``), rendered."""
    visible_approval(request, approval_id)
    approval = services.approval_decide(
        approval_id=approval_id,
        decider=services.Decider.agent(
            principal(request).actor, user_id=principal(request).key.user_id
        ),
        **decision,
    )
    shown = sees_values(principal(request).key)
    return Response(approval_data(approval_now(approval), sees_values=shown))


class ApprovalDecideView(ApiView):
    required_permissions = {"POST": DECIDE}
    approve = True

    @extend_schema(
        request=ApprovalDecisionRequestSerializer,
        responses={200: ApprovalSerializer, 409: CONFLICT},
        parameters=[APPROVAL_ID_PARAMETER],
    )
    def post(self, request: Request, approval_id: str) -> Response:
        data = parsed(ApprovalDecisionRequestSerializer, request.data if request.data else {})
        edited = {"edited_value": data["edited_value"]} if "edited_value" in data else {}
        return _decided(
            request,
            approval_id,
            approve=True,
            reason=data["reason"],
            expected_value_hash=data.get("expected_value_hash"),
            **edited,
        )


class ApprovalRejectView(ApiView):
    required_permissions = {"POST": DECIDE}

    @extend_schema(
        request=RejectionSerializer,
        responses={200: ApprovalSerializer, 409: CONFLICT},
        parameters=[APPROVAL_ID_PARAMETER],
    )
    def post(self, request: Request, approval_id: str) -> Response:
        data = parsed(DecisionSerializer, request.data if request.data else {})
        return _decided(request, approval_id, approve=False, reason=data["reason"])


class ApprovalRequestChangesView(ApiView):
    required_permissions = {"POST": DECIDE}

    @extend_schema(
        request=ChangesRequestSerializer,
        responses={200: ApprovalSerializer, 409: CONFLICT},
        parameters=[APPROVAL_ID_PARAMETER],
        description="Ends the request with status `changes_requested`; the message (stored "
        "as `reason`) goes to the agent, which may ask again naming `previous_id`.",
    )
    def post(self, request: Request, approval_id: str) -> Response:
        data = parsed(ChangesRequestSerializer, request.data if request.data else {})
        return _decided(
            request, approval_id, approve=False, reason=data["message"], request_changes=True
        )
