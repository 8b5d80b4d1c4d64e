"""A risk officer decides in a real Chromium while an agent waits on its socket."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import httpx
import pytest
import websockets
from django.conf import settings
from django.contrib.auth.models import Group, User

from access.identity import Actor
from access.services import api_key_create
from approvals.roles import groups_ensure
from shards.services import shard_create
from tests.access.test_key_admin_browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


class AgentSocket:
    """The requesting agent's /ws/agents/ connection, listening in a thread."""

    def __init__(self, ws_url: str, key: str, agent_id: str) -> None:
        self.messages: list[dict] = []
        self.ready = threading.Event()
        self.got_one = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._run(ws_url, key, agent_id),)
        )
        self._thread.start()
        assert self.ready.wait(10), "agent socket did not open"

    async def _run(self, ws_url: str, key: str, agent_id: str) -> None:
        headers = {"X-API-Key": key, "X-Agent-Id": agent_id}
        async with websockets.connect(ws_url, additional_headers=headers) as socket:
            self.ready.set()
            while not self._stop.is_set():
                try:
                    message = await asyncio.wait_for(socket.recv(), timeout=0.2)
                except TimeoutError:
                    continue
                self.messages.append(json.loads(message))
                self.got_one.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def scene(live_server_url):
    groups_ensure()  # transactional tests flush what the migration created
    User.objects.create_user("rita", password="correct horse battery").groups.add(
        Group.objects.get(name="Risk officers")
    )
    shard_create(
        actor=Actor("treasurer"),
        shard_id="treasury",
        shard_type="decision",
        initial_value={"balance": 1000, "payments": [], "owner": "finance"},
        reversible=False,
    )
    _, key = api_key_create(
        name="executor",
        permissions=["shard:read", "approval:request"],
        agent_ids=["executor"],
    )
    socket = AgentSocket(
        live_server_url.replace("http://", "ws://") + "/ws/agents/", key, "executor"
    )
    api = httpx.Client(
        base_url=live_server_url, headers={"X-API-Key": key, "X-Agent-Id": "executor"}
    )
    shots = Path(settings.DATA_DIR) / "screenshots"
    shots.mkdir(exist_ok=True)
    yield live_server_url, api, socket, shots
    socket.close()


def request_payment(api: httpx.Client, description: str, amount: int) -> str:
    response = api.post(
        "/api/approvals/request",
        json={
            "shard_id": "treasury",
            "proposed_value": {
                "balance": 1000 - amount,
                "payments": [{"to": "acme", "amount": amount}],
                "owner": "finance",
            },
            "expected_version": 1,
            "description": description,
        },
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def signed_in_page(playwright, url: str):
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
    )
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{url}/accounts/login/?next=/console/")
    page.fill("#id_username", "rita")
    page.fill("#id_password", "correct horse battery")
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-live='open']", timeout=10000)
    return browser, page


def test_a_request_appears_live_and_approving_it_commits_and_tells_the_agent(scene):
    from playwright.sync_api import expect, sync_playwright

    url, api, socket, shots = scene
    with sync_playwright() as playwright:
        browser, page = signed_in_page(playwright, url)
        expect(page.locator("#queue-rows")).to_contain_text("Nothing is waiting")

        approval_id = request_payment(api, "Pay ACME invoice 42", 250)
        row = page.locator(f"tr[data-approval-id='{approval_id}']")
        expect(row).to_be_visible(timeout=5000)  # no reload: pushed over /ws/live/
        expect(row).to_contain_text("executor")
        expect(row.locator(".countdown")).to_contain_text("m")
        page.screenshot(path=str(shots / "console-queue.png"), full_page=True)

        row.locator("a").click()
        expect(page.locator("#description-text")).to_have_text("Pay ACME invoice 42")
        expect(page.locator(".diff .line.add").first).to_contain_text("750")
        expect(page.locator(".diff .line.del").first).to_contain_text("1000")
        page.screenshot(path=str(shots / "console-detail.png"), full_page=True)

        page.fill("#reason", "Invoice 42 matches the purchase order")
        page.click("button[value=approve]")
        page.click("#confirm-yes")  # approving takes a confirmation step
        expect(page.locator(".msg.success")).to_contain_text("treasury is now at version 2")
        expect(page.locator("#approval-status")).to_have_text("committed")
        page.screenshot(path=str(shots / "console-approved.png"), full_page=True)

        # Decided requests leave the queue.
        page.goto(f"{url}/console/")
        expect(page.locator("#queue-rows")).to_contain_text("Nothing is waiting")
        browser.close()

    shard = api.get("/api/shards/treasury").json()
    assert (shard["version"], shard["value"]["balance"]) == (2, 750)
    assert socket.got_one.wait(5)
    decided = socket.messages[0]
    assert decided["type"] == "approval_decided"
    assert (decided["approval_id"], decided["status"]) == (approval_id, "committed")
    assert decided["commit"]["version"] == 2


def test_a_risk_officer_rejects_with_a_reason_and_nothing_is_written(scene):
    from playwright.sync_api import expect, sync_playwright

    url, api, socket, shots = scene
    approval_id = request_payment(api, "Wire everything to an unknown account", 1000)
    with sync_playwright() as playwright:
        browser, page = signed_in_page(playwright, url)
        page.locator(f"tr[data-approval-id='{approval_id}'] a").click()
        page.click("#reject")  # no reason yet: stopped in the browser, next to the field
        expect(page.locator("#reason-error")).to_contain_text("Give a reason to reject")
        page.fill("#reason", "Unknown beneficiary")
        page.click("#reject")
        expect(page.locator("#approval-status")).to_have_text("rejected")
        expect(page.locator(".facts")).to_contain_text("Unknown beneficiary")
        page.screenshot(path=str(shots / "console-rejected.png"), full_page=True)
        browser.close()

    assert api.get("/api/shards/treasury").json()["version"] == 1
    assert socket.got_one.wait(5)
    assert (socket.messages[0]["status"], socket.messages[0]["reason"]) == (
        "rejected",
        "Unknown beneficiary",
    )
