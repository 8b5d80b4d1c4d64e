"""Request parsing and response shapes for claims (the OpenAPI document reads
them too)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.inputs import Int64Field, StringField

from .claims import HOLDER

MAX_FIELDS = 32  # in where, and in set
MAX_FIELD_NAME = 128
MAX_STRING = 1024
_SCALAR_SCHEMA = {
    "oneOf": [
        {"type": "string", "maxLength": MAX_STRING},
        {"type": "number"},
        {"type": "boolean"},
    ],
    "nullable": True,
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


@extend_schema_field(
    {
        "type": "object",
        "minProperties": 1,
        "maxProperties": MAX_FIELDS,
        "additionalProperties": _SCALAR_SCHEMA,
    }
)
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


class ClaimSerializer(serializers.Serializer):
    where = TaskFieldsField(
        help_text="What a free task looks like: every field equal (as a transaction's "
        '`==` compare), e.g. {"status": "pending"}.'
    )
    set = TaskFieldsField(
        help_text='Fields the claimed task gets, e.g. {"status": "claimed"}; the '
        "server also sets `holder` to the acting agent."
    )
    lease_id = StringField(
        required=False,
        allow_null=True,
        max_length=64,
        help_text="A lease of the caller's: the task's holder is removed when it ends.",
    )
    fence = Int64Field(required=False, allow_null=True, min_value=1)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = set(self.initial_data) - set(self.fields)
        if unknown:
            raise serializers.ValidationError(f"Unknown fields: {sorted(unknown)}.")
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
