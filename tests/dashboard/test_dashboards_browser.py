"""Operators watch in a real Chromium: versions change without a reload, and the
metrics page draws real data."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User

from access.identity import Actor
from access.services import api_key_create
from approvals.roles import groups_ensure
from shards.services import shard_create
from tests.access.test_key_admin_browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_the_shards_page_shows_a_commit_live_and_metrics_draw(live_server_url):
    from playwright.sync_api import expect, sync_playwright

    groups_ensure()
    User.objects.create_user("victor", password="correct horse battery").groups.add(
        Group.objects.get(name="Viewers")
    )
    for n in range(3):
        shard_create(
            actor=Actor("seed"), shard_id=f"fleet.{n}", shard_type="decision", initial_value=0
        )
    _, key = api_key_create(name="agent", permissions=["shard:read", "shard:write"])
    api = httpx.Client(
        base_url=live_server_url, headers={"X-API-Key": key, "X-Agent-Id": "pilot-7"}
    )
    shots = Path(settings.DATA_DIR) / "screenshots"
    shots.mkdir(exist_ok=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{live_server_url}/accounts/login/?next=/dashboard/shards")
        page.fill("#id_username", "victor")
        page.fill("#id_password", "correct horse battery")
        page.click("button[type=submit]")
        page.wait_for_selector("body[data-live='open']", timeout=10000)
        row = page.locator("tr[data-shard-id='fleet.1']")
        expect(row.locator(".version")).to_have_text("v1")

        committed_at = time.monotonic()
        response = api.post(
            "/api/shards/fleet.1/commit", json={"expected_version": 1, "new_value": 42}
        )
        assert response.status_code == 200
        # Liveness: pushed (and coalesced for 0.25 s) in well under a second here;
        # 5 s only catches a page that never updates without reloading.
        expect(row.locator(".version")).to_have_text("v2", timeout=5000)
        seen_after = time.monotonic() - committed_at
        print(f"\nthe page showed the commit {seen_after * 1000:.0f} ms after it")
        expect(row.locator(".updated-by")).to_have_text("pilot-7")
        page.screenshot(path=str(shots / "dashboard-shards.png"), full_page=True)

        # Some traffic for the charts: commits and a conflict.
        for version in range(2, 12):
            api.post(
                "/api/shards/fleet.1/commit",
                json={"expected_version": version, "new_value": version},
            )
        api.post("/api/shards/fleet.1/commit", json={"expected_version": 1, "new_value": -1})
        page.goto(f"{live_server_url}/dashboard/metrics")
        page.wait_for_function(
            # A function, not an expression: the page's CSP forbids eval of strings.
            "() => Number(document.body.dataset.metricsDrawn || 0) >= 2",
            timeout=10000,
        )
        commits = page.evaluate(
            "Chart.getChart('chart-rates').data.datasets[0].data.reduce((a, b) => a + b, 0)"
        )
        p99 = page.evaluate(
            "Chart.getChart('chart-latency').data.datasets[1].data.filter(v => v !== null).length"
        )
        assert commits >= 11 and p99 >= 1
        expect(page.locator("#tile-commits")).not_to_have_text("0.0")
        page.screenshot(path=str(shots / "dashboard-metrics.png"), full_page=True)
        browser.close()
