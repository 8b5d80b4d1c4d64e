"""Request parsing and response shapes for claims (the OpenAPI document reads
them too)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import serializers

from common.ids import SHARD_ID_REGEX, AgentIdField
from common.inputs import INT64_MAX, INT64_MIN, Int64Field, StrictSerializer, StringField
from common.openapi import (
    JSON_NUMBER,
    JSON_VALUE,
    NO_NUL,
    NON_EMPTY_NO_NUL,
    body_rules_register,
)
from shards.rules import FENCE_MAX, FENCE_MIN
from shards.serializers import FenceField

from .claims import HOLDER
from .leases import MAX_TTL, MIN_TTL
from .models import LEASE_ID_REGEX, RESERVATION_ID_REGEX
from .reservations import MAX_CHECK_PATHS, MAX_PATTERNS, MAX_REASON
from .reservations import MAX_PATH as MAX_FILE_PATH
from .txn import COMPARE_OPS, MAX_ITEMS, MAX_PATH

MAX_FIELDS = 32  # in where, and in set
MAX_FIELD_NAME = 128
MAX_STRING = 1024
_SCALAR_SCHEMA = {
    "oneOf": [
        {"type": "string", "maxLength": MAX_STRING, "pattern": NO_NUL},
        JSON_NUMBER,
        {"type": "boolean"},
    ],
    "nullable": True,
}
_FIELDS_SCHEMA = {
    "type": "object",
    "minProperties": 1,
    "maxProperties": MAX_FIELDS,
    "additionalProperties": _SCALAR_SCHEMA,
    "description": f"Field names are at most {MAX_FIELD_NAME} characters.",
}


@extend_schema_field(_SCALAR_SCHEMA)
class ScalarField(serializers.JSONField):
    """A string (at most MAX_STRING characters), a number, a boolean or null:
    what a task's field is compared with or set to."""

    def to_internal_value(self, data: Any) -> Any:
        if data is not None and not isinstance(data, str | int | float | bool):
            raise serializers.ValidationError("Must be a string, number, boolean or null.")
        if isinstance(data, str) and len(data) > MAX_STRING:
            raise serializers.ValidationError(f"Strings are at most {MAX_STRING} characters.")
        return data


@extend_schema_field(_FIELDS_SCHEMA)
class TaskFieldsField(serializers.DictField):
    """A non-empty object of at most MAX_FIELDS task fields with scalar values."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=ScalarField(allow_null=True), allow_empty=False, **kwargs)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            if len(data) > MAX_FIELDS:
                raise serializers.ValidationError(f"At most {MAX_FIELDS} fields.")
            if any(len(name) > MAX_FIELD_NAME for name in data):
                raise serializers.ValidationError(
                    f"Field names are at most {MAX_FIELD_NAME} characters."
                )
        return super().to_internal_value(data)


@extend_schema_field({**_FIELDS_SCHEMA, "not": {"required": [HOLDER]}})
class TaskSetField(TaskFieldsField):
    """The fields a claimed task gets: never ``holder``, which the server sets."""


class ClaimSerializer(StrictSerializer):
    where = TaskFieldsField(
        help_text="What a free task looks like: every field equal (as a transaction's "
        '`==` compare), e.g. {"status": "pending"}.'
    )
    set = TaskSetField(
        help_text='Fields the claimed task gets, e.g. {"status": "claimed"}; the '
        "server also sets `holder` to the acting agent."
    )
    lease_id = StringField(
        required=False,
        allow_null=True,
        max_length=64,
        help_text="A lease of the caller's: the task's holder is removed when it ends.",
    )
    fence = FenceField()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if HOLDER in attrs["set"]:
            raise serializers.ValidationError(
                {"set": [f"{HOLDER} is set by the server: it is the acting agent."]}
            )
        return attrs


class ClaimResultSerializer(serializers.Serializer):
    task_id = serializers.CharField()
    task = serializers.DictField(help_text="The claimed task as written.")
    version = serializers.IntegerField(help_text="The queue's new version.")
    audit_entry_id = serializers.IntegerField()
    value = serializers.JSONField(
        required=False,
        help_text="The whole queue as written; left out with `Prefer: return=minimal`.",
    )


LEASE_ID_PARAMETER = OpenApiParameter(
    "lease_id", OpenApiTypes.STR, OpenApiParameter.PATH, pattern=LEASE_ID_REGEX
)


class LeaseRequestSerializer(serializers.Serializer):
    """Documents the body of POST /api/leases (``leases.lease_grant`` checks it;
    other fields are ignored)."""

    ttl_seconds = Int64Field(min_value=MIN_TTL, max_value=MAX_TTL)
    session = serializers.BooleanField(
        required=False,
        help_text="Kept alive by the holder's open agent sockets instead of keep-alive "
        "calls; ends ttl_seconds after the last one closes. Needs an open socket "
        "(409 NO_SESSION).",
    )


# --- POST /api/txn: the body txn_parse reads, as OpenAPI ----------------------------


def _txn_schema() -> dict[str, Any]:
    shard_id = {"type": "string", "pattern": SHARD_ID_REGEX}
    key = {
        "oneOf": [
            {"type": "string", "pattern": NO_NUL},
            {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX},
        ]
    }
    path = {"type": "array", "items": key, "maxItems": MAX_PATH, "nullable": True}
    no_path = {"type": "array", "maxItems": 0, "nullable": True}
    lease_id = {"type": "string", "pattern": NON_EMPTY_NO_NUL, "nullable": True}
    version_compare = {
        "type": "object",
        "properties": {
            "shard_id": shard_id,
            "version": {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
        },
        "required": ["shard_id", "version"],
        "additionalProperties": False,
    }
    valueless = sorted({"exists", "not_exists"} & COMPARE_OPS)
    field_compare = {
        "type": "object",
        "properties": {
            "shard_id": shard_id,
            "op": {"type": "string", "enum": sorted(COMPARE_OPS)},
            "path": path,
            "value": JSON_VALUE,
        },
        "required": ["shard_id", "op"],
        "additionalProperties": JSON_VALUE,  # ignored
        # "version" makes it a version check; ==, !=, < and > need a value.
        "not": {"required": ["version"]},
        "anyOf": [{"properties": {"op": {"enum": valueless}}}, {"required": ["value"]}],
    }

    def op(name: str, required: list[str], **fields: Any) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "op": {"type": "string", "enum": [name]},
                "shard_id": shard_id,
                "lease_id": lease_id,
                **fields,
            },
            "required": ["op", "shard_id", *required],
            "additionalProperties": JSON_VALUE,  # ignored
        }

    operation = {
        "oneOf": [
            op("get", [], path=path),
            op("put", ["value"], path=path, value=JSON_VALUE),
            op("delete", ["path"], path={**path, "minItems": 1, "nullable": False}),
            op(
                "append",
                ["items"],
                path=no_path,
                items={"type": "array", "items": JSON_VALUE, "minItems": 1},
            ),
        ]
    }
    operations = {"type": "array", "items": operation, "maxItems": MAX_ITEMS}
    return {
        "type": "object",
        "description": "Compares, then the success or the failure operations (docs/api.md, "
        "Transactions). At least one operation in success or failure.",
        "properties": {
            "compare": {
                "type": "array",
                "items": {"oneOf": [version_compare, field_compare]},
                "maxItems": MAX_ITEMS,
            },
            "success": operations,
            "failure": operations,
            "fence": {
                "type": "integer",
                "minimum": FENCE_MIN,
                "maximum": FENCE_MAX,
                "nullable": True,
            },
        },
        "additionalProperties": False,
        "anyOf": [
            {"required": ["success"], "properties": {"success": {"minItems": 1}}},
            {"required": ["failure"], "properties": {"failure": {"minItems": 1}}},
        ],
    }


class TxnSerializer(serializers.Serializer):
    """Documents the body of POST /api/txn (``txn.txn_parse`` reads it); the
    schema of each compare and operation is written out in ``_txn_schema``."""

    compare = serializers.ListField(child=serializers.DictField(), required=False)
    success = serializers.ListField(child=serializers.DictField(), required=False)
    failure = serializers.ListField(child=serializers.DictField(), required=False)
    fence = FenceField()


body_rules_register("Txn", _txn_schema, body_required=True)


class AgentKeySerializer(serializers.Serializer):
    name = serializers.CharField()
    prefix = serializers.CharField()


class AgentLeaseSerializer(serializers.Serializer):
    lease_id = serializers.CharField()
    ttl_seconds = serializers.IntegerField()
    expires_at = serializers.DateTimeField()
    fence = serializers.IntegerField()


class AgentSerializer(serializers.Serializer):
    """Documents one connected agent (``coordination.sessions.agents_live``)."""

    agent_id = serializers.CharField()
    key = AgentKeySerializer()
    connected_since = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    sockets = serializers.IntegerField(min_value=1)
    leases = AgentLeaseSerializer(many=True)


class AgentListSerializer(serializers.Serializer):
    results = AgentSerializer(many=True)


# --- path reservations --------------------------------------------------------------

RESERVATION_ID_PARAMETER = OpenApiParameter(
    "reservation_id", OpenApiTypes.STR, OpenApiParameter.PATH, pattern=RESERVATION_ID_REGEX
)


# The shape a document can state of a path or a glob: '/'-separated segments, none
# empty, no control character. The rest (no '.' or '..' segment, a closed '[',
# no lone surrogate) is coordination.globs', refused with 400 VALIDATION_ERROR.
SEGMENTS_REGEX = r"^[^/\x00-\x1f\x7f-\x9f]+(/[^/\x00-\x1f\x7f-\x9f]+)*$"


class ReservationRequestSerializer(serializers.Serializer):
    """Documents the body of POST /api/reservations (``reservations.reservation_create``
    checks it; other fields are ignored)."""

    patterns = serializers.ListField(
        child=serializers.RegexField(SEGMENTS_REGEX, max_length=256, trim_whitespace=False),
        min_length=1,
        max_length=MAX_PATTERNS,
        help_text="Globs of relative paths: `*`, `?`, `[...]` within a segment, `**` for any "
        "number of segments (`src/**` covers `src` too), `\\` escapes.",
    )
    exclusive = serializers.BooleanField(
        required=False,
        default=True,
        help_text="Exclusive (the default) refuses every overlapping reservation of another "
        "agent; shared ones refuse only exclusive ones.",
    )
    ttl_seconds = Int64Field(
        min_value=MIN_TTL,
        max_value=MAX_TTL,
        required=False,
        help_text="Required unless lease_id is given; renewed by keep-alive.",
    )
    reason = serializers.CharField(required=False, max_length=MAX_REASON, allow_blank=True)
    lease_id = serializers.RegexField(
        LEASE_ID_REGEX,
        required=False,
        help_text="A live lease of the caller's: the reservation ends when it does "
        "(a session lease: when the agent's sockets are gone).",
    )


class ReservationSerializer(serializers.Serializer):
    reservation_id = serializers.CharField()
    patterns = serializers.ListField(child=serializers.CharField())
    exclusive = serializers.BooleanField()
    holder = serializers.CharField()
    key = AgentKeySerializer()
    reason = serializers.CharField(allow_blank=True)
    lease_id = serializers.CharField(allow_null=True)
    ttl_seconds = serializers.IntegerField(allow_null=True)
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="None: it lives as long as its lease."
    )
    fence = serializers.IntegerField(help_text="Grows with every reservation made.")
    created_at = serializers.DateTimeField()


class ReservationListSerializer(serializers.Serializer):
    results = ReservationSerializer(many=True)
    count = serializers.IntegerField(help_text="All that matched; at most 1000 are listed.")


class ReservationListQuerySerializer(serializers.Serializer):
    holder = AgentIdField(required=False)
    path = serializers.RegexField(
        SEGMENTS_REGEX,
        required=False,
        max_length=MAX_FILE_PATH,
        help_text="Only those with a pattern matching this path.",
    )


class ReservationCheckSerializer(serializers.Serializer):
    paths = serializers.ListField(
        child=serializers.RegexField(
            SEGMENTS_REGEX, max_length=MAX_FILE_PATH, trim_whitespace=False
        ),
        min_length=1,
        max_length=MAX_CHECK_PATHS,
    )


class ReservationCheckConflictSerializer(serializers.Serializer):
    path = serializers.CharField()
    reservation = ReservationSerializer()


class ReservationCheckResultSerializer(serializers.Serializer):
    conflicts = ReservationCheckConflictSerializer(many=True)
