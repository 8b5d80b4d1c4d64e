"""Input parsing and the documented response shapes of /api/approvals."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from shards.inputs import Int64Field
from shards.jsondiff import json_diff
from shards.serializers import ShardIdField

from .models import Approval, ApprovalStatus
from .services import DEFAULT_TTL_SECONDS, MAX_TTL_SECONDS, MIN_TTL_SECONDS


class ApprovalRequestSerializer(serializers.Serializer):
    shard_id = ShardIdField()
    proposed_value = serializers.JSONField(allow_null=True)
    expected_version = Int64Field(min_value=1)
    description = serializers.CharField(max_length=4000)
    ttl_seconds = Int64Field(
        required=False,
        default=DEFAULT_TTL_SECONDS,
        min_value=MIN_TTL_SECONDS,
        max_value=MAX_TTL_SECONDS,
    )


class DecisionSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class ApprovalListQuerySerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ApprovalStatus.choices, required=False)
    shard_id = serializers.CharField(required=False, max_length=128)
    requested_by = serializers.CharField(required=False, max_length=128)
    # page x limit is an SQL OFFSET: it must stay inside 64 bits.
    page = Int64Field(required=False, min_value=1, max_value=10**12, default=1)
    limit = Int64Field(required=False, min_value=1, max_value=500)


class ApprovalDecisionSerializer(serializers.Serializer):
    decider = serializers.CharField()
    approve = serializers.BooleanField()
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()


class ApprovalSerializer(serializers.ModelSerializer):
    """Documents the shape ``approval_data`` renders."""

    diff = serializers.ListField(child=serializers.DictField(), allow_null=True)
    current_version = serializers.IntegerField(allow_null=True)
    stale = serializers.BooleanField()
    decisions = ApprovalDecisionSerializer(many=True)

    class Meta:
        model = Approval
        fields = [
            "id",
            "shard_id",
            "status",
            "description",
            "requested_by",
            "proposed_value",
            "expected_version",
            "value_at_request",
            "version_at_request",
            "current_version",
            "stale",
            "diff",
            "approvals_required",
            "decisions",
            "created_at",
            "expires_at",
            "decided_at",
            "decided_by",
            "reason",
            "commit",
        ]


class ApprovalPageSerializer(serializers.Serializer):
    results = ApprovalSerializer(many=True)
    next = serializers.CharField(allow_null=True)


def _time(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def approval_data(approval: Approval, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """``current``: the shard's {"version", "value"} now, for the diff and drift;
    without it the diff is against the value at request time."""
    base = current["value"] if current else approval.value_at_request
    current_version = current["version"] if current else None
    return {
        "id": approval.id,
        "shard_id": approval.shard_id,
        "status": approval.effective_status,
        "description": approval.description,
        "requested_by": approval.requested_by,
        "proposed_value": approval.proposed_value,
        "expected_version": approval.expected_version,
        "value_at_request": approval.value_at_request,
        "version_at_request": approval.version_at_request,
        "current_version": current_version,
        # Drift: the shard moved on while this waited; approving would fail stale.
        "stale": current_version is not None and current_version != approval.expected_version,
        "diff": json_diff(base, approval.proposed_value),
        "approvals_required": approval.approvals_required,
        "decisions": [
            {
                "decider": d.decider,
                "approve": d.approve,
                "reason": d.reason,
                "created_at": _time(d.created_at),
            }
            for d in approval.decisions.all()
        ],
        "created_at": _time(approval.created_at),
        "expires_at": _time(approval.expires_at),
        "decided_at": _time(approval.decided_at),
        "decided_by": approval.decided_by,
        "reason": approval.reason,
        "commit": approval.commit,
    }
