"""The agents page in a real Chromium: an agent appears while its socket is
open, with its sockets and leases, and leaves when it closes."""

from __future__ import annotations

import asyncio
import threading

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
