"""The error answers of /api/ in the OpenAPI document (docs/api.md, "Errors").

Every endpoint may answer 400, 401, 403, 404, 413, 415 and 429 in the one error
envelope (common/errors.py), so one postprocessing hook lists them on every /api/
operation instead of each view repeating them. Views add only what is theirs
(409 conflicts, 503) with ``extend_schema(responses={409: CONFLICT})``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from common.paths import is_api_path


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
