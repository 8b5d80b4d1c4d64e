"""The error answers of /api/ in the OpenAPI document (docs/api.md, "Errors").

Every endpoint may answer 400, 401, 403, 404, 413, 415 and 429 in the one error
envelope (common/errors.py), so one postprocessing hook lists them on every /api/
operation instead of each view repeating them. Views add only what is theirs
(409 conflicts, 503) with ``extend_schema(responses={409: CONFLICT})``.

And what a request may carry (common/inputs.py), said where drf-spectacular
would not say it, so that a request the document allows is one the server
takes: strict string fields are non-empty unless blank is allowed and never
hold NUL; a ``StrictSerializer`` body has ``additionalProperties: false``; a
free JSON value (``JSON_VALUE``) holds no NUL and no number past 64 bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from common.inputs import INT64_MAX, INT64_MIN
from common.paths import is_api_path

# SafeJSONParser refuses NUL in every string of a body (PostgreSQL's jsonb cannot
# store it), and DRF's string fields in every query parameter.
NO_NUL = "^[^\\u0000]*$"
# A strict string field's: one or more characters, none of them NUL. (Where blank
# is allowed drf-spectacular adds "or empty" beside it, which stays exclusive.)
NON_EMPTY_NO_NUL = "^[^\\u0000]+$"
# JSON Schema cannot tell 1e30 from 1000000000000000000000000000000 (the parser
# takes the first, refuses the second as past 64 bits): every number is bounded.
JSON_NUMBER: dict[str, Any] = {"type": "number", "minimum": INT64_MIN, "maximum": INT64_MAX}
JSON_VALUE: dict[str, Any] = {"$ref": "#/components/schemas/JsonValue"}
_JSON_VALUE_SCHEMA: dict[str, Any] = {
    "description": "Any JSON value, within the input rules: no string holds NUL, "
    "integers fit in 64 bits, nesting stops at ZEROLOCK_MAX_JSON_DEPTH. Object keys "
    "may not hold NUL either (which OpenAPI 3.0 cannot say).",
    "nullable": True,
    "anyOf": [
        {"type": "string", "pattern": NO_NUL},
        JSON_NUMBER,
        {"type": "boolean"},
        {"type": "array", "items": JSON_VALUE},
        {"type": "object", "additionalProperties": JSON_VALUE},
    ],
}


class StrictStringSchema(OpenApiSerializerFieldExtension):
    """A strict (``JsonTyped``) string field: at least one character unless it
    allows blank (drf-spectacular leaves that out of shared components), and no
    NUL; a field with a pattern of its own (a shard id) already says more."""

    target_class = "common.inputs.JsonTyped"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        field = self.target
        if isinstance(field, serializers.CharField) and not any(
            isinstance(v, RegexValidator) for v in field.validators
        ):
            schema["pattern"] = NON_EMPTY_NO_NUL
        return schema


class FreeJsonSchema(OpenApiSerializerFieldExtension):
    """A JSON field of a request body: any value within the input rules."""

    target_class = serializers.JSONField
    priority = -1  # fields with a schema of their own (extend_schema_field) keep it

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        if direction != "request":
            return auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        return JSON_VALUE


_BODY_RULES: dict[str, tuple[Callable[[], dict[str, Any]], bool]] = {}


def body_rules_register(
    component: str, rules: Callable[[], dict[str, Any]], *, body_required: bool = False
) -> None:
    """Rules between the fields of a request body (``anyOf``, ``allOf``, ``not``)
    for its component, or the detail of a body no serializer parses. Added by
    ``add_body_rules`` after drf-spectacular's enum pass, which would make a
    component of every one-value enum in them. ``body_required``: the body must
    be sent even though no one field is required (drf-spectacular's own test)."""
    _BODY_RULES[component] = (rules, body_required)


def add_body_rules(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: see ``body_rules_register``. Also,
    the fields an open body (not a ``StrictSerializer``) ignores are still JSON
    under the input rules: its ``additionalProperties`` is ``JsonValue``."""
    schemas = result.get("components", {}).get("schemas", {})
    prefix = "#/components/schemas/"
    required = set()
    for component, (rules, body_required) in _BODY_RULES.items():
        if component in schemas:
            schemas[component].update(rules())
            if body_required:
                required.add(prefix + component)
    for item in result.get("paths", {}).values():
        for operation in item.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if not body:
                continue
            ref = body["content"].get("application/json", {}).get("schema", {}).get("$ref", "")
            if ref.startswith(prefix):
                schemas[ref.removeprefix(prefix)].setdefault("additionalProperties", JSON_VALUE)
            if ref in required:
                body["required"] = True
    return result


class ClosedBodySchema(OpenApiSerializerExtension):
    """A ``StrictSerializer`` refuses unknown fields: its schema says so."""

    target_class = "common.inputs.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["additionalProperties"] = False
        return schema


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Contract code, e.g. STALE_VERSION.")
    message = serializers.CharField()


class ErrorEnvelopeSerializer(serializers.Serializer):
    """``{"error": {"code", "message", ...details}}``: details vary by code."""

    error = ErrorBodySerializer()


CONFLICT = OpenApiResponse(
    ErrorEnvelopeSerializer,
    description="Conflict: STALE_VERSION, READ_SET_STALE, FENCED, SHARD_EXISTS, "
    "APPROVAL_NOT_PENDING, APPROVAL_EXPIRED or ALREADY_DECIDED (see the code).",
)

COMMON_ERRORS: dict[str, str] = {
    "400": "MALFORMED_JSON, VALIDATION_ERROR or another refusal of the input",
    "401": "UNAUTHENTICATED, KEY_REVOKED or KEY_EXPIRED",
    "403": "PERMISSION_DENIED (or a rule of the shard, see the code)",
    "404": "NOT_FOUND, SHARD_NOT_FOUND, APPROVAL_NOT_FOUND, LEASE_NOT_FOUND",
    "413": "PAYLOAD_TOO_LARGE, or SHARD_TOO_LARGE for a write to an additive shard",
    "415": "UNSUPPORTED_MEDIA_TYPE",
    "429": "RATE_LIMITED, with Retry-After",
}
_ENVELOPE = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}


def add_error_responses(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: the common error answers on every /api/
    operation, each pointing at the one ErrorEnvelope schema."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ErrorEnvelope", _ENVELOPE)
    schemas.setdefault("JsonValue", _JSON_VALUE_SCHEMA)
    ref = {"$ref": "#/components/schemas/ErrorEnvelope"}
    for path, item in result.get("paths", {}).items():
        if not is_api_path(path):
            continue
        for method, operation in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            for status, description in COMMON_ERRORS.items():
                responses.setdefault(
                    status,
                    {"description": description, "content": {"application/json": {"schema": ref}}},
                )
    return result


# RFC 7240 (common/prefer.py), on the writes that answer with a value.
PREFER = OpenApiParameter(
    "Prefer",
    str,
    OpenApiParameter.HEADER,
    required=False,
    enum=["return=minimal", "return=representation"],
    description="`return=minimal`: the answer leaves out the value (a commit's or "
    "claim's `value`, a transaction's `responses`) and carries "
    "`Preference-Applied: return=minimal`. Without it, nothing changes.",
)
PREFERENCE_APPLIED = OpenApiParameter(
    "Preference-Applied",
    str,
    OpenApiParameter.HEADER,
    response=[200],
    enum=["return=minimal"],
    description="Present when the request's `Prefer: return=minimal` was honoured.",
)
PREFER_PARAMETERS = [PREFER, PREFERENCE_APPLIED]
