"""The HTTP wiring of the error envelope (common/errors.py): DRF exceptions
through ``api_exception_handler``, and whatever Django answers around DRF
(unknown URL, a CSRF refusal, a crash) through ``ApiErrorEnvelopeMiddleware``
and the ``handler400..500`` views. It sits in the top layer because it knows
DRF and Django's views; the errors themselves stay in the bottom one.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response

from common.errors import ApiError, ErrorCode, envelope, internal_error
from common.paths import is_api_path

logger = logging.getLogger(__name__)


_DRF_CODES: list[tuple[type[Exception], ErrorCode]] = [
    (drf_exceptions.ParseError, ErrorCode.MALFORMED_JSON),
    (drf_exceptions.NotAuthenticated, ErrorCode.UNAUTHENTICATED),
    (drf_exceptions.AuthenticationFailed, ErrorCode.UNAUTHENTICATED),
    (drf_exceptions.PermissionDenied, ErrorCode.PERMISSION_DENIED),
    (drf_exceptions.NotFound, ErrorCode.NOT_FOUND),
    (drf_exceptions.MethodNotAllowed, ErrorCode.METHOD_NOT_ALLOWED),
    (drf_exceptions.NotAcceptable, ErrorCode.NOT_ACCEPTABLE),
    (drf_exceptions.UnsupportedMediaType, ErrorCode.UNSUPPORTED_MEDIA_TYPE),
    (drf_exceptions.Throttled, ErrorCode.RATE_LIMITED),
    (drf_exceptions.ValidationError, ErrorCode.VALIDATION_ERROR),
]


def _first_message(detail: Any) -> str:
    if isinstance(detail, dict):
        for field, value in detail.items():
            inner = _first_message(value)
            return inner if field == "non_field_errors" else f"{field}: {inner}"
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, Http404):  # raised by Django or DRF machinery, not by our views
        exc = drf_exceptions.NotFound()
    if isinstance(exc, ApiError):
        response = Response(exc.envelope(), status=exc.status)
        if exc.status == 401:
            response["WWW-Authenticate"] = "X-API-Key"
        if exc.status == 429:
            response["Retry-After"] = str(exc.details["retry_after"])
        return response
    if isinstance(exc, drf_exceptions.APIException):
        code = next((c for cls, c in _DRF_CODES if isinstance(exc, cls)), ErrorCode.ERROR)
        if code == ErrorCode.MALFORMED_JSON:
            message = f"Request body is not valid JSON: {exc.detail}"
        else:
            message = _first_message(exc.detail)
        details: dict[str, Any] = {}
        if isinstance(exc, drf_exceptions.ValidationError):
            details["fields"] = exc.detail
        response = Response(envelope(code, message, **details), status=exc.status_code)
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            response["WWW-Authenticate"] = auth_header
        wait = getattr(exc, "wait", None)
        if wait:
            response["Retry-After"] = str(int(wait))
        return response
    return None


_STATUS_CODES = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHENTICATED,
    403: ErrorCode.PERMISSION_DENIED,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
}


class ApiErrorEnvelopeMiddleware:
    """Keeps ``/api/`` answers JSON even where DRF never ran: an unknown path, a
    CSRF refusal or an unexpected crash.

    Deliberately sync-only and innermost (see MIDDLEWARE in settings)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self._after(request, self.get_response(request))

    def _after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if not is_api_path(request.path):
            return response
        if response.status_code < 400 or _is_json(response):
            return response
        status = response.status_code
        code = _STATUS_CODES.get(
            status, ErrorCode.INTERNAL_ERROR if status >= 500 else ErrorCode.ERROR
        )
        message = response.reason_phrase or "Error"
        if status == 404:
            message = f"No API endpoint at {request.path}."
        replacement = JsonResponse(envelope(code, message), status=status)
        for header in ("Allow", "Retry-After", "WWW-Authenticate"):
            if response.has_header(header):
                replacement[header] = response[header]
        return replacement

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not is_api_path(request.path):
            return None
        logger.exception("Unhandled error on %s %s", request.method, request.path)
        return JsonResponse(internal_error().envelope(), status=500)


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").startswith("application/json")


# Django's error handlers (urls.py handler400/403/404/500): they answer for
# failures in the middleware outside ApiErrorEnvelopeMiddleware (a disallowed
# host, a crash in the session or CSRF layer), where the middleware never runs.
def _api_or(default: Any, status: int) -> Any:
    def handler(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
        if is_api_path(request.path):
            if status == 500:
                return JsonResponse(internal_error().envelope(), status=500)
            code = _STATUS_CODES[status]
            return JsonResponse(
                envelope(code, f"{code.replace('_', ' ').capitalize()}."), status=status
            )
        return default(request) if status == 500 else default(request, exception)

    return handler


handler400 = _api_or(defaults.bad_request, 400)
handler403 = _api_or(defaults.permission_denied, 403)
handler404 = _api_or(defaults.page_not_found, 404)
handler500 = _api_or(defaults.server_error, 500)
