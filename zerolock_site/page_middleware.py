"""The console's middleware, run for pages only, and a CSP middleware that builds
its one fixed policy once.

On a GET of one shard (bench/profile.py get --gil) Django's page middleware
(sessions, CSRF, authentication, messages, htmx) and django-csp's per-response
policy build took about 8 % of the web process's CPU, for requests that carry an
API key and never a cookie. Each class here is a subclass of the one it replaces,
so Django's and the admin's checks still find them in MIDDLEWARE."""

from __future__ import annotations

from typing import Any

from axes import middleware as axes
from csp.constants import HEADER
from csp.middleware import CheckableLazyObject
from csp.middleware import CSPMiddleware as _CSPMiddleware
from csp.utils import build_policy
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.http import HttpRequest, HttpResponse
from django.middleware import csrf
from django_htmx import middleware as htmx

from common.paths import needs_page_middleware


class _PagesOnly:
    get_response: Any

    def __call__(self, request: HttpRequest) -> Any:
        if not needs_page_middleware(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class SessionMiddleware(_PagesOnly, sessions.SessionMiddleware):
    pass


class CsrfViewMiddleware(_PagesOnly, csrf.CsrfViewMiddleware):
    """Its ``process_view`` still runs for API views: DRF's views are csrf_exempt
    and return at once, and an unsafe method on a plain view is refused as before
    (no cookie means no token)."""


class AuthenticationMiddleware(_PagesOnly, auth.AuthenticationMiddleware):
    pass


class MessageMiddleware(_PagesOnly, messages.MessageMiddleware):
    pass


class HtmxMiddleware(_PagesOnly, htmx.HtmxMiddleware):
    pass


class AxesMiddleware(_PagesOnly, axes.AxesMiddleware):
    """The login lockout page, for pages only: API keys never go through
    authenticate() and have their own limits (access/ratelimit.py). Sync, like
    the rest of the chain (HTTP is served as WSGI)."""

    async_capable = False


# Attributes a view or decorator may set to change the policy of one response.
_PER_RESPONSE = (
    "_csp_config",
    "_csp_update",
    "_csp_replace",
    "_csp_exempt",
    "_csp_config_ro",
    "_csp_update_ro",
    "_csp_replace_ro",
    "_csp_exempt_ro",
)


class CSPMiddleware(_CSPMiddleware):
    """Every response that used no nonce and no per-view override gets the same
    header, built once here; the rest (pages with a nonce, DEBUG's error pages, a
    report-only policy) go through django-csp unchanged."""

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)
        policy = getattr(settings, "CONTENT_SECURITY_POLICY", None) or {}
        self.fixed = build_policy()
        self.fixed_applies = bool(
            self.fixed
            and not policy.get("EXCLUDE_URL_PREFIXES")
            and not build_policy(report_only=True)
        )

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:  # type: ignore[override]
        if (
            not self.fixed_applies
            or settings.DEBUG
            or getattr(request, "_csp_nonce", None) is not None
            or any(hasattr(response, name) for name in _PER_RESPONSE)
        ):
            return super().process_response(request, response)  # type: ignore[return-value]
        if HEADER not in response:
            response[HEADER] = self.fixed
        # As django-csp does: a nonce asked for after the header is written is an error.
        request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)  # type: ignore[attr-defined]
        return response
