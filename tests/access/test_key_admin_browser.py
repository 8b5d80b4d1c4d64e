"""An admin manages keys in a real Chromium: create, see the key once, use it, revoke it."""

from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def test_an_admin_creates_a_key_in_the_browser_uses_it_and_revokes_it(live_server_url):
    from playwright.sync_api import expect, sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is required (make test installs it)"
    get_user_model().objects.create_superuser("root-admin", "", "correct horse battery")
    shots = Path(settings.DATA_DIR) / "screenshots"
    shots.mkdir(exist_ok=True)
    api = f"{live_server_url}/api/shards"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page()
        page.goto(f"{live_server_url}/admin/login/?next=/admin/access/apikey/add/")
        page.fill("#id_username", "root-admin")
        page.fill("#id_password", "correct horse battery")
        page.click("input[type=submit]")

        page.fill("#id_name", "browser-made")
        page.check("input[name=permissions][value='shard:read']")
        page.fill("#id_agent_ids", "crew-7")
        page.click("input[name=_save]")
        expect(page.locator(".errornote")).to_contain_text("will not be shown again")
        raw = page.input_value("#raw-key")
        page.screenshot(path=str(shots / "admin-key-created.png"))

        used = httpx.get(api, headers={"X-API-Key": raw, "X-Agent-Id": "crew-7"})
        assert used.status_code == 200

        page.goto(f"{live_server_url}/admin/access/apikey/")
        assert raw not in page.content()
        page.locator("tr", has_text="browser-made").locator("input.action-select").check()
        page.select_option("select[name=action]", "revoke")
        page.click("button[name=index]")
        expect(page.locator(".messagelist")).to_contain_text("Revoked 1 key")
        page.screenshot(path=str(shots / "admin-key-revoked.png"))
        browser.close()

    refused = httpx.get(api, headers={"X-API-Key": raw, "X-Agent-Id": "crew-7"})
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "KEY_REVOKED"
