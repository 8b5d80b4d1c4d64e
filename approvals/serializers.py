"""Input parsing and the documented response shapes of /api/approvals."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import prefetch_related_objects
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from audit.chain import value_digest
from common.boundeddiff import json_too_deep
from common.ids import ShardIdField
from common.inputs import (
    ChoiceField,
    Int64Field,
    QueryInt64Field,
    StrictSerializer,
    StringField,
    iso_time,
)
from common.openapi import JSON_VALUE

from .diffs import ApprovalDiff, approval_diff, stored_diff
from .models import (
    APPROVAL_ID_REGEX,
    Approval,
    ApprovalDecision,
    ApprovalStatus,
    decisions_prefetch,
    quorum_count,
)
from .selectors import CURSOR_REGEX, ApprovalNow, is_cursor
from .services import DEFAULT_TTL_SECONDS, MAX_TTL_SECONDS, MIN_TTL_SECONDS

PAGE_MAX = 10**12
METADATA_MAX_BYTES = 16 * 1024
METADATA_MAX_DEPTH = 8


@extend_schema_field({"type": "object", "additionalProperties": JSON_VALUE})
class MetadataField(serializers.JSONField):
    """A JSON object (``metadata_check``: at most METADATA_MAX_BYTES and
    METADATA_MAX_DEPTH levels)."""


def metadata_check(value: Any) -> None:
    if not isinstance(value, dict):
        raise serializers.ValidationError("Must be a JSON object.")
    if json_too_deep(value, METADATA_MAX_DEPTH):
        raise serializers.ValidationError(f"Nested more than {METADATA_MAX_DEPTH} levels deep.")
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    if size > METADATA_MAX_BYTES:
        raise serializers.ValidationError(
            f"{size:,} bytes of JSON; at most {METADATA_MAX_BYTES:,}."
        )


class ApprovalRequestSerializer(StrictSerializer):
    shard_id = ShardIdField()
    proposed_value = serializers.JSONField(allow_null=True)
    expected_version = Int64Field(min_value=1)
    description = StringField(max_length=4000)
    ttl_seconds = Int64Field(
        required=False,
        default=DEFAULT_TTL_SECONDS,
        min_value=MIN_TTL_SECONDS,
        max_value=MAX_TTL_SECONDS,
    )
    metadata = MetadataField(
        required=False,
        default=dict,
        validators=[metadata_check],
        help_text="A JSON object for the officer: tool name, arguments, links, ticket "
        f"(at most {METADATA_MAX_BYTES // 1024} KiB, {METADATA_MAX_DEPTH} levels).",
    )
    previous_id = serializers.RegexField(
        APPROVAL_ID_REGEX,
        required=False,
        default="",
        help_text="An earlier approval of the same shard, requested with the same key, "
        "that this one follows (e.g. after changes were requested).",
    )


class DecisionSerializer(StrictSerializer):
    reason = StringField(required=False, allow_blank=True, default="", max_length=4000)


class ApprovalDecisionRequestSerializer(DecisionSerializer):
    """An approval: optionally of a value the decider edited."""

    edited_value = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="Approve this value instead of the proposal. Checked like a commit (size, "
        "the shard's value_schema and owners; a refusal leaves the request pending), then "
        "committed at the approval's expected_version. Approvals cast for another value stop "
        "counting: the edit is its decider's one vote for the edited value.",
    )
    expected_value_hash = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        required=False,
        help_text="Approve only if the value this request would apply is still the one the "
        "decider saw: its applied_value_hash (SHA-256 of the canonical JSON). Another "
        "decider's edit in between answers 409 APPROVAL_VALUE_CHANGED and records nothing.",
    )


def _strip_class() -> str:
    """The characters ``str.strip`` removes, as a regex class body. A regex ``\\s``
    differs by engine (ECMA's lacks U+001C-U+001F and U+0085, which Python strips),
    so the document lists them: a reason of "\\x1d" alone is blank to the server."""
    return "".join(f"\\u{c:04x}" for c in range(0x10000) if chr(c).isspace())


@extend_schema_field(
    {
        "type": "string",
        "maxLength": 4000,
        # Something besides blanks: services.approval_decide strips the reason.
        "pattern": f"^[^\\u0000]*[^\\u0000{_strip_class()}][^\\u0000]*$",
    }
)
class ReasonField(StringField):
    pass


class RejectionSerializer(StrictSerializer):
    """Documents a rejection's body: the same fields as an approval's, but a
    rejection needs a reason (``services.approval_decide`` refuses one without)."""

    reason = ReasonField(max_length=4000)


class ChangesRequestSerializer(StrictSerializer):
    """Request changes: ends the request; the message goes to the agent."""

    message = ReasonField(max_length=4000)


class ApprovalCursorField(serializers.RegexField):
    """A list cursor (``selectors.cursor_of``; ``cursor_parse`` reads it)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(CURSOR_REGEX, trim_whitespace=False, **kwargs)
        self.error_messages["invalid"] = "Not a cursor: use the `next` of the page before."

    def to_internal_value(self, data: Any) -> str:
        text = super().to_internal_value(data)
        if not is_cursor(text):  # the pattern's "$" also passes a final newline
            self.fail("invalid")
        return text


class ApprovalListQuerySerializer(serializers.Serializer):
    status = ChoiceField(choices=ApprovalStatus.choices, required=False)
    shard_id = StringField(required=False, max_length=128)
    requested_by = StringField(required=False, max_length=128)
    after = ApprovalCursorField(
        required=False, help_text="Continue after this cursor (what `next` sets)."
    )
    # Deprecated (views.PAGE_PARAMETER). page x limit is an SQL OFFSET: it must
    # stay inside 64 bits.
    page = QueryInt64Field(required=False, min_value=1, max_value=PAGE_MAX)
    limit = QueryInt64Field(required=False, min_value=1, max_value=500)


class ApprovalDecisionSerializer(serializers.Serializer):
    decider = serializers.CharField()
    approve = serializers.BooleanField()
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()
    principal = serializers.CharField(help_text='Who counts: "key:<prefix>" or "user:<id>".')
    principal_name = serializers.CharField(help_text="The key's name or the user's username.")
    agent_id = serializers.CharField(help_text="The agent id the key acted as; empty for people.")
    counts = serializers.BooleanField(
        help_text="Whether this decision counts toward the quorum (false once a later edit "
        "replaced the value it approved)."
    )
    kind = serializers.ChoiceField(
        choices=["approve", "reject", "edit", "request_changes"],
        help_text="`edit`: an approval of the approval's edited_value.",
    )


class ApprovalSerializer(serializers.ModelSerializer):
    """Documents the shape ``approval_data`` renders."""

    diff = serializers.ListField(
        child=serializers.DictField(),
        allow_null=True,
        help_text="RFC 6902 patch; null when too large, deep or slow to compute.",
    )
    diff_truncated = serializers.BooleanField(help_text="The diff was left out (see diff_omitted).")
    diff_omitted = serializers.ChoiceField(
        choices=["too_large", "too_deep", "too_slow", "not_readable"], allow_null=True
    )
    diff_version = serializers.IntegerField(help_text="The shard version the diff starts from.")
    current_version = serializers.IntegerField(allow_null=True)
    stale = serializers.BooleanField()
    approvals_counted = serializers.IntegerField(
        help_text="Approvals by distinct principals so far (of approvals_required)."
    )
    decisions = ApprovalDecisionSerializer(many=True)
    requested_key = serializers.DictField(
        help_text='The key that asked: {"name", "prefix"} as they were at request time.'
    )
    edited_value = serializers.JSONField(
        allow_null=True,
        help_text="The value a decider approved instead of proposed_value (null unless "
        "`edited`); it is what applies.",
    )
    edited = serializers.BooleanField(help_text="A decider edited the value.")
    edited_by = serializers.CharField(help_text="Who edited it; empty unless `edited`.")
    applied_value = serializers.JSONField(
        allow_null=True,
        help_text="What an approval writes: edited_value when edited, else proposed_value.",
    )
    applied_value_hash = serializers.CharField(
        help_text="SHA-256 (hex) of applied_value's canonical JSON: send it back as the "
        "approve call's expected_value_hash to approve only the value you saw.",
    )
    previous_id = serializers.CharField(
        allow_null=True, help_text="The earlier request this one follows, if any."
    )
    approver_group = serializers.CharField(
        allow_null=True,
        help_text="The group its route gave it to, fixed at request time; null: unrouted "
        "(every decider).",
    )
    escalation_group = serializers.CharField(
        allow_null=True,
        help_text="The group it goes to as well when undecided in time; null: it never escalates.",
    )
    escalated_at = serializers.DateTimeField(
        allow_null=True, help_text="When it escalated to escalation_group; null: not (yet)."
    )

    class Meta:
        model = Approval
        fields = [
            "id",
            "shard_id",
            "status",
            "description",
            "requested_by",
            "requested_key",
            "metadata",
            "proposed_value",
            "edited_value",
            "edited",
            "edited_by",
            "applied_value",
            "applied_value_hash",
            "previous_id",
            "expected_version",
            "value_at_request",
            "version_at_request",
            "current_version",
            "stale",
            "diff",
            "diff_truncated",
            "diff_omitted",
            "diff_version",
            "approvals_required",
            "approvals_counted",
            "decisions",
            "created_at",
            "expires_at",
            "decided_at",
            "decided_by",
            "reason",
            "commit",
            "approver_group",
            "escalation_group",
            "escalated_at",
        ]


class ApprovalPageSerializer(serializers.Serializer):
    results = ApprovalSerializer(many=True)
    next = serializers.CharField(allow_null=True)


def decision_data(decision: ApprovalDecision) -> dict[str, Any]:
    return {
        "decider": decision.decider,
        "approve": decision.approve,
        "reason": decision.reason,
        "created_at": iso_time(decision.created_at),
        "principal": decision.principal,
        "principal_name": decision.principal_name,
        "agent_id": decision.agent_id,
        "counts": decision.counts,
        "kind": decision.kind or ("approve" if decision.approve else "reject"),
    }


def approval_data(
    read: ApprovalNow,
    *,
    sees_values: bool = True,
    listed: bool = False,
    decisions: list[ApprovalDecision] | None = None,
) -> dict[str, Any]:
    """``read``: the approval beside its shard now, for ``current_version`` and
    ``stale``, and for a diff against the current value (the stored one while the
    shard has not moved). ``listed``: the stored diff against the value at
    request time, always: a list never computes a diff. ``sees_values`` False
    (``access.identity.sees_values``: a key without ``shard:read``): neither the
    value at request nor the diff, which is made from the shard's values.
    ``decisions``: the approval's, when already read (a list reads a page's at
    once); else they are read from the approval."""
    approval = read.approval
    if not sees_values:
        diff = ApprovalDiff(None, "not_readable", approval.version_at_request)
    elif listed:
        diff = stored_diff(approval)
    else:
        diff = approval_diff(approval, read.shard)
    if decisions is None:
        prefetch_related_objects([approval], decisions_prefetch())  # a no-op when prefetched
        decisions = list(approval.decisions.all())
    return {
        "id": approval.id,
        "shard_id": approval.shard_id,
        "status": approval.effective_status,
        "description": approval.description,
        "requested_by": approval.requested_by,
        "requested_key": {
            "name": approval.requested_key_name,
            "prefix": approval.requested_key_prefix,
        },
        "metadata": approval.metadata,
        "proposed_value": approval.proposed_value,
        "edited_value": approval.edited_value,
        "edited": approval.edited,
        "edited_by": approval.edited_by,
        "applied_value": approval.value_to_apply,
        "applied_value_hash": value_digest(approval.value_to_apply),
        "previous_id": approval.previous_id or None,
        "expected_version": approval.expected_version,
        "value_at_request": approval.value_at_request if sees_values else None,
        "version_at_request": approval.version_at_request,
        "current_version": read.current_version,
        "stale": read.stale,
        "diff": diff.patch,
        "diff_truncated": diff.patch is None,
        "diff_omitted": diff.omitted or None,
        "diff_version": diff.version,
        "approvals_required": approval.approvals_required,
        "approvals_counted": quorum_count(decisions),
        "decisions": [decision_data(d) for d in decisions],
        "created_at": iso_time(approval.created_at),
        "expires_at": iso_time(approval.expires_at),
        "decided_at": iso_time(approval.decided_at),
        "decided_by": approval.decided_by,
        "reason": approval.reason,
        "commit": approval.commit,
        "approver_group": approval.approver_group.name if approval.approver_group else None,
        "escalation_group": approval.escalation_group.name if approval.escalation_group else None,
        "escalated_at": iso_time(approval.escalated_at),
    }
