"""The agents page in a real Chromium: an agent appears while its socket is
open, with its sockets and leases, and leaves when it closes."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
import websockets

from access.services import api_key_create
from tests.approvals.conftest import browser, console  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_the_agents_page_shows_an_agent_while_it_is_connected(console, browser):  # noqa: F811
    from playwright.sync_api import expect

    _, raw = api_key_create(name="builders", permissions=["shard:read"])
    page = browser(console["url"], "rita", path="/dashboard/agents")
    expect(page.locator("#agent-rows")).to_contain_text("No agent is connected")
    close = threading.Event()
    opened = threading.Event()

    def hold_socket() -> None:
        async def run() -> None:
            url = console["url"].replace("http://", "ws://") + "/ws/agents/"
            async with websockets.connect(
                url, additional_headers={"X-API-Key": raw, "X-Agent-Id": "builder-3"}
            ):
                opened.set()
                while not close.is_set():
                    await asyncio.sleep(0.05)

        asyncio.run(run())

    holder = threading.Thread(target=hold_socket, daemon=True)
    holder.start()
    assert opened.wait(10)
    row = page.locator("#agent-rows tr[data-agent-id='builder-3']")
    expect(row).to_contain_text("builders", timeout=8000)
    expect(row.locator(".sockets")).to_have_text("1")
    close.set()
    holder.join(10)
    expect(row).to_have_count(0, timeout=8000)


def test_the_agents_page_shows_path_reservations_with_their_holder_live(
    console,  # noqa: F811
    browser,  # noqa: F811
):
    from playwright.sync_api import expect

    _, raw = api_key_create(name="coders", permissions=["shard:read", "shard:write"])
    page = browser(console["url"], "rita", path="/dashboard/agents")
    expect(page.locator("#reservation-rows")).to_contain_text("No path is reserved")
    close = threading.Event()
    opened = threading.Event()
    coder = {"X-API-Key": raw, "X-Agent-Id": "coder-7"}

    def hold_socket() -> None:
        async def run() -> None:
            url = console["url"].replace("http://", "ws://") + "/ws/agents/"
            async with websockets.connect(url, additional_headers=coder):
                opened.set()
                while not close.is_set():
                    await asyncio.sleep(0.05)

        asyncio.run(run())

    holder = threading.Thread(target=hold_socket, daemon=True)
    holder.start()
    assert opened.wait(10)
    with httpx.Client(base_url=console["url"], headers=coder) as http:
        made = http.post(
            "/api/reservations",
            json={"patterns": ["src/**/*.py"], "ttl_seconds": 600, "reason": "parser rewrite"},
        )
        assert made.status_code == 201, made.text
        row = page.locator("#agent-rows tr[data-agent-id='coder-7']")
        expect(row.locator(".reservations")).to_contain_text(
            "src/**/*.py (exclusive)", timeout=8000
        )
        listed = page.locator(
            f"#reservation-rows tr[data-reservation-id='{made.json()['reservation_id']}']"
        )
        expect(listed).to_contain_text("parser rewrite")
        expect(listed).to_contain_text("coder-7")
        close.set()
        holder.join(10)
        # The agent is gone; its reservation is not: it has its own ttl.
        expect(row).to_have_count(0, timeout=8000)
        expect(listed).to_have_count(1)
        assert http.delete(f"/api/reservations/{made.json()['reservation_id']}").status_code == 204
    expect(page.locator("#reservation-rows")).to_contain_text("No path is reserved", timeout=8000)
