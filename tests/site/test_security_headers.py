"""Issue 16, finding 14: a Content-Security-Policy on every page, HSTS and Secure
cookies when served over HTTPS, and the pages still work under the policy."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth.models import User

from tests.access.test_key_admin_browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import server_env, start_server, stop_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_pages_and_the_api_carry_csp_and_the_other_browser_headers_but_no_hsts_on_http(
    live_server_url,
):
    for path in ("/", "/accounts/login/", "/api/health", "/api/docs", "/api/no-such-path"):
        response = httpx.get(f"{live_server_url}{path}", timeout=5)
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
        assert "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "same-origin"
        assert response.headers["X-Frame-Options"] == "DENY"
        assert "Strict-Transport-Security" not in response.headers
    login = httpx.get(f"{live_server_url}/accounts/login/", timeout=5)
    assert "secure" not in login.headers["set-cookie"].lower()  # plain http keeps working


def test_behind_https_cookies_are_secure_and_hsts_is_sent():
    User.objects.create_user("olivia", password="correct horse battery")
    env = server_env() | {"ZEROLOCK_HTTPS": "true", "ZEROLOCK_TRUST_X_FORWARDED_PROTO": "true"}
    proc, url = start_server(env)
    try:
        with httpx.Client(base_url=url, headers={"X-Forwarded-Proto": "https"}) as browser:
            form = browser.get("/accounts/login/")
            assert form.headers["Strict-Transport-Security"].startswith("max-age=31536000")
            assert "; secure" in form.headers["set-cookie"].lower()  # csrftoken
            signed_in = browser.post(
                "/accounts/login/",
                data={
                    "username": "olivia",
                    "password": "correct horse battery",
                    "csrfmiddlewaretoken": form.cookies["csrftoken"],
                },
                # httpx keeps Secure cookies off plain http, as a browser would.
                headers={
                    "Origin": url.replace("http://", "https://"),
                    "Cookie": f"csrftoken={form.cookies['csrftoken']}",
                },
            )
            session = [
                c for c in signed_in.headers.get_list("set-cookie") if c.startswith("sessionid")
            ]
            assert session and "; secure" in session[0].lower(), signed_in.headers
    finally:
        stop_server(proc)


def test_the_pages_run_under_the_policy_without_a_single_violation(live_server_url):
    from playwright.sync_api import sync_playwright

    User.objects.create_superuser("root", password="correct horse battery")
    violations: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page()
        page.on(
            "console",
            lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
        )
        page.goto(f"{live_server_url}/accounts/login/?next=/console/")
        page.fill("#id_username", "root")
        page.fill("#id_password", "correct horse battery")
        page.click("button[type=submit]")
        page.wait_for_url("**/console/")
        for path in (
            "/",
            "/console/",
            "/console/history",
            "/dashboard/shards",
            "/dashboard/metrics",
            "/admin/",
        ):
            page.goto(f"{live_server_url}{path}")
            page.wait_for_load_state("networkidle")
        page.goto(f"{live_server_url}/api/docs")
        page.wait_for_selector(".swagger-ui .info", timeout=10000)  # Swagger UI rendered
        browser.close()
    assert violations == []
