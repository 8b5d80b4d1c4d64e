"""The metrics page in a real Chromium: savings without sockets, hot shards,
the empty state, tiles equal to the dashed chart lines."""

from __future__ import annotations

import pytest

from tests.approvals.conftest import browser, console  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_metrics_say_no_agent_sockets_show_hot_shards_and_an_empty_state(console, browser):  # noqa: F811
    from playwright.sync_api import expect

    page = browser(console["url"], "rita", path="/dashboard/metrics")
    expect(page.locator("#tile-savings")).to_have_text("no agent sockets")
    expect(page.locator("#metrics-empty")).to_be_visible()
    expect(page.locator("#hot-shards")).to_contain_text("No commits in the last minute")
    executor = console["executor"]
    for n in range(3):
        executor.commit("budget", {"limit": n, "note": "x"})
    expect(page.locator("#hot-shards tr[data-shard-id='budget']")).to_contain_text(
        "3", timeout=8000
    )
    expect(page.locator("#metrics-empty")).to_be_hidden()
    # The tile is the dashed line's value: both come from the same minute.
    tile = float(page.locator("#tile-commits").inner_text())
    line = page.evaluate("Chart.getChart('chart-rates').data.datasets[2].data.slice(-1)[0]")
    assert tile == pytest.approx(line, abs=0.005) and tile > 0
