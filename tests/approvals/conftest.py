"""Fixtures for the console's browser tests: officers, an agent with a key, a
live web server and a real Chromium."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User

from access.identity import Actor
from access.services import api_key_create
from approvals.roles import groups_ensure
from shards.services import shard_create

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "correct horse battery"
SCREENSHOTS = Path(settings.DATA_DIR) / "screenshots"  # the test run's, not make run's var/


def officer(name: str) -> User:
    groups_ensure()  # transactional tests flush what the migration created
    user = User.objects.create_user(name, password=PASSWORD)
    user.groups.add(Group.objects.get(name="Risk officers"))
    return user


class Agent:
    """An agent calling the live server's API with its own key."""

    def __init__(self, url: str, name: str, permissions: list[str], key_name: str = "") -> None:
        _, self.key = api_key_create(
            name=key_name or f"{name} key", permissions=permissions, agent_ids=[name]
        )
        self.http = httpx.Client(
            base_url=url, headers={"X-API-Key": self.key, "X-Agent-Id": name}, timeout=10
        )

    def request(self, shard_id: str, value: Any, description: str, **extra: Any) -> str:
        version = self.http.get(f"/api/shards/{shard_id}").json()["version"]
        response = self.http.post(
            "/api/approvals/request",
            json={
                "shard_id": shard_id,
                "proposed_value": value,
                "expected_version": version,
                "description": description,
                **extra,
            },
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def commit(self, shard_id: str, value: Any) -> int:
        version = self.http.get(f"/api/shards/{shard_id}").json()["version"]
        response = self.http.post(
            f"/api/shards/{shard_id}/commit",
            json={"expected_version": version, "new_value": value},
        )
        assert response.status_code == 200, response.text
        return response.json()["version"]


@pytest.fixture
def console(live_server_url) -> Iterator[dict[str, Any]]:
    """Two officers, an irreversible treasury (quorum 1), a reversible budget, a
    two-officer board shard (quorum 2) and an executor agent."""
    officer("rita")
    officer("sam")
    for shard_id, value, reversible, quorum in [
        ("treasury", {"balance": 1000, "payments": [], "owner": "finance"}, False, 1),
        ("budget", {"limit": 100, "note": "start"}, True, 1),
        ("board", {"seats": 3}, False, 2),
    ]:
        shard_create(
            actor=Actor("treasurer"),
            shard_id=shard_id,
            shard_type="decision",
            initial_value=value,
            reversible=reversible,
            approvals_required=quorum,
        )
    executor = Agent(
        live_server_url,
        "executor",
        ["shard:read", "shard:write", "approval:request"],
        key_name="payments bot",
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    yield {"url": live_server_url, "executor": executor, "shots": SCREENSHOTS}


@pytest.fixture
def browser(monkeypatch) -> Iterator[Callable[..., Any]]:
    """``browser(url, user, width=1440, height=900)``: a signed-in page."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the tests still
    # read the database between steps, which is safe here (one thread).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    assert Path(CHROMIUM).exists(), "Debian's chromium is required"
    playwright = sync_playwright().start()
    opened: list[Any] = []

    def page_for(
        url: str, user: str, *, width: int = 1440, height: int = 900, path: str = "/console/"
    ):
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        opened.append(chromium)
        page = chromium.new_page(viewport={"width": width, "height": height})
        page.goto(f"{url}/accounts/login/?next={path}")
        page.fill("#id_username", user)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_selector("body[data-live='open']", timeout=10000)
        return page

    yield page_for
    # While Playwright's loop runs, Django keeps this test's connections in
    # context-local storage (asgiref): close them here, or PostgreSQL refuses to
    # drop the test database at the end ("being accessed by other users").
    from django.db import connections

    connections.close_all()
    for chromium in opened:
        chromium.close()
    playwright.stop()
