"""The console's middleware runs for pages only, and the fixed CSP header is the
one django-csp builds (zerolock_site/page_middleware.py)."""

from __future__ import annotations

import pytest
from axes.handlers.proxy import AxesProxyHandler
from csp.constants import HEADER
from csp.decorators import csp_update
from csp.middleware import CSPMiddleware as DjangoCSPMiddleware
from csp.utils import build_policy
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, RequestFactory

from zerolock_site.page_middleware import AxesMiddleware, CSPMiddleware

pytestmark = pytest.mark.django_db


def test_an_api_request_gets_no_session_user_or_messages_but_a_page_does():
    browser = Client()
    api = browser.get("/api/health").wsgi_request
    page = browser.get("/accounts/login/").wsgi_request
    for attribute in ("session", "_messages", "htmx"):
        assert not hasattr(api, attribute), attribute
        assert hasattr(page, attribute), attribute
    assert "csrftoken" in browser.cookies  # the login form still set its CSRF cookie


def test_an_unsafe_request_to_a_page_still_needs_its_csrf_token():
    refused = Client(enforce_csrf_checks=True).post(
        "/accounts/login/", {"username": "mallory", "password": "x"}
    )
    assert refused.status_code == 403


def test_the_header_built_once_is_the_policy_django_csp_would_build():
    response = Client().get("/api/health")
    assert response[HEADER] == build_policy()


def test_views_that_change_their_policy_get_what_django_csp_gives_them():
    @csp_update({"img-src": ["https://images.example"]})
    def updating(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    def using_a_nonce(request: HttpRequest) -> HttpResponse:
        return HttpResponse(f"<script nonce='{request.csp_nonce}'></script>")  # type: ignore[attr-defined]

    ours = CSPMiddleware(updating)(RequestFactory().get("/somewhere"))
    assert "https://images.example" in ours[HEADER]
    assert ours[HEADER] == DjangoCSPMiddleware(updating)(RequestFactory().get("/"))[HEADER]
    with_nonce = CSPMiddleware(using_a_nonce)(RequestFactory().get("/somewhere"))
    assert "nonce=" in with_nonce.content.decode()
    assert (
        with_nonce[HEADER] == DjangoCSPMiddleware(using_a_nonce)(RequestFactory().get("/"))[HEADER]
    )


def test_axes_turns_a_locked_page_login_into_its_page_but_leaves_the_api_alone():
    def locked(request: HttpRequest) -> HttpResponse:
        # What axes' backend leaves on a request whose login it refused.
        AxesProxyHandler.update_request(request)
        request.axes_locked_out = True  # type: ignore[attr-defined]
        request.axes_credentials = {"username": "rita"}  # type: ignore[attr-defined]
        return JsonResponse({"ok": True})

    api = AxesMiddleware(locked)(RequestFactory().post("/api/shards"))
    assert (api.status_code, api.content) == (200, b'{"ok": true}')
    page = AxesMiddleware(locked)(RequestFactory().post("/accounts/login/"))
    assert page.status_code == 429 and b"Sign-in paused" in page.content
