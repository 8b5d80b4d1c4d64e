"""/api/approval-policies: standing approval policies (approvals.policies)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.auth import principal
from common.api import ApiView
from common.inputs import (
    INT64_MAX,
    INT64_MIN,
    ChoiceField,
    Int64Field,
    StrictSerializer,
    StringField,
    parsed,
)
from common.openapi import JSON_VALUE, NO_NUL, ErrorEnvelopeSerializer, body_rules_register
from coordination.txn import COMPARE_OPS, MAX_PATH

from . import policies
from .models import POLICY_ID_REGEX, ApprovalPolicy, PolicyEffect
from .serializers import ReasonField

POLICY = "approval:policy"

POLICY_ID_PARAMETER = OpenApiParameter(
    "policy_id", OpenApiTypes.STR, OpenApiParameter.PATH, pattern=POLICY_ID_REGEX
)

COMPARE_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {
            "type": "array",
            "maxItems": MAX_PATH,
            "nullable": True,
            "items": {
                "oneOf": [
                    {"type": "string", "pattern": NO_NUL},
                    {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX},
                ]
            },
        },
        "op": {"type": "string", "enum": sorted(COMPARE_OPS)},
        "value": JSON_VALUE,
    },
    "required": ["op"],
    "additionalProperties": False,
    # As a transaction's compare (coordination.serializers): all but exists and
    # not_exists need a value.
    "anyOf": [
        {"properties": {"op": {"enum": ["exists", "not_exists"]}}},
        {"required": ["value"]},
    ],
}


@extend_schema_field({"type": "array", "maxItems": policies.MAX_WHEN, "items": COMPARE_SCHEMA})
class WhenField(serializers.JSONField):
    """A list of /api/txn compares on the proposed value (checked by the service)."""


class PolicyCreateSerializer(StrictSerializer):
    shard_prefix = StringField(
        max_length=128,
        allow_blank=True,
        help_text="Requests on shards whose id starts with this (case-sensitive); "
        "empty: every shard (unscoped keys only).",
    )
    requested_by = StringField(required=False, allow_blank=True, default="", max_length=128)
    key_prefix = StringField(required=False, allow_blank=True, default="", max_length=16)
    when = WhenField(required=False)
    effect = ChoiceField(choices=PolicyEffect.values)
    ttl_seconds = Int64Field(
        required=False,
        min_value=policies.MIN_POLICY_SECONDS,
        max_value=policies.MAX_POLICY_SECONDS,
    )
    expires_at = serializers.DateTimeField(required=False)
    reason = ReasonField(max_length=4000)


# Exactly one of ttl_seconds and expires_at (policies.policy_expiry).
body_rules_register(
    "PolicyCreate",
    lambda: {"oneOf": [{"required": ["ttl_seconds"]}, {"required": ["expires_at"]}]},
)


class PolicySerializer(serializers.Serializer):
    """What the endpoints answer (``policies.policy_data``)."""

    id = serializers.RegexField(POLICY_ID_REGEX)
    shard_prefix = serializers.CharField()
    requested_by = serializers.CharField()
    key_prefix = serializers.CharField()
    when = WhenField()
    effect = serializers.ChoiceField(choices=PolicyEffect.values)
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    created_by = serializers.CharField()
    live = serializers.BooleanField(help_text="Not yet expired: it still decides requests.")


class PolicyListSerializer(serializers.Serializer):
    results = PolicySerializer(many=True)


class PolicyListQuerySerializer(StrictSerializer):
    shard_prefix = StringField(required=False, max_length=128, help_text="Exactly this prefix.")
    effect = ChoiceField(required=False, choices=PolicyEffect.values)
    live = serializers.BooleanField(
        required=False, help_text="true: only unexpired; false: only expired."
    )


class PolicyListView(ApiView):
    required_permissions = {"GET": POLICY, "POST": POLICY}

    @extend_schema(parameters=[PolicyListQuerySerializer], responses={200: PolicyListSerializer})
    def get(self, request: Request) -> Response:
        query = parsed(PolicyListQuerySerializer, request.query_params.dict())
        found = ApprovalPolicy.objects.within_scopes(principal(request).key.shard_prefixes)
        if "shard_prefix" in query:
            found = found.filter(shard_prefix=query["shard_prefix"])
        if "effect" in query:
            found = found.filter(effect=query["effect"])
        if query.get("live") is True:
            found = found.live()
        elif query.get("live") is False:
            found = found.exclude(pk__in=ApprovalPolicy.objects.live().values("pk"))
        return Response({"results": [policies.policy_data(p) for p in found[:1000]]})

    @extend_schema(
        request=PolicyCreateSerializer,
        responses={
            201: PolicySerializer,
            409: OpenApiResponse(
                ErrorEnvelopeSerializer,
                description="TOO_MANY_POLICIES: the author already holds "
                "ZEROLOCK_MAX_POLICIES_PER_AUTHOR live policies (`limit`).",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = parsed(PolicyCreateSerializer, request.data)
        who = principal(request)
        policy = policies.policy_create(
            created_by=f"agent:{who.actor.agent_id}" if who.actor.agent_id else who.key.name,
            author_key=who.key,
            author_user_id=who.key.user_id,
            **data,
        )
        return Response(policies.policy_data(policy), status=201)


class PolicyDetailView(ApiView):
    required_permissions = {"GET": POLICY, "DELETE": POLICY}

    @extend_schema(parameters=[POLICY_ID_PARAMETER], responses={200: PolicySerializer})
    def get(self, request: Request, policy_id: str) -> Response:
        policy = policies.policy_get(policy_id, principal(request).key.shard_prefixes)
        return Response(policies.policy_data(policy))

    @extend_schema(parameters=[POLICY_ID_PARAMETER], responses={204: None})
    def delete(self, request: Request, policy_id: str) -> Response:
        who = principal(request)
        policies.policy_delete(
            policy_id=policy_id,
            scopes=who.key.shard_prefixes,
            deleted_by=f"agent:{who.actor.agent_id}" if who.actor.agent_id else who.key.name,
            key_prefix=who.key.prefix,
        )
        return Response(status=204)
