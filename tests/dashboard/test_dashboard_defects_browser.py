"""Issue 28, console defect 9: the dashboards. The p99 tile says where it is
measured, the four charts share the server's clock (one x range), hot shards
are ordered by commits, a shard's history links an approved commit to its
approval and approvers, and the README's addresses lead to pages."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth.models import User

from access.identity import Actor
from approvals.services import Decider, approval_decide
from shards.services import shard_create
from tests.approvals.conftest import browser, console  # noqa: F401 (fixtures)
from tests.approvals.test_queue_browser import until

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

CHARTS = ["chart-rates", "chart-latency", "chart-approvals", "chart-ws"]


def stale_commit(executor, shard_id: str) -> None:
    response = executor.http.post(
        f"/api/shards/{shard_id}/commit", json={"expected_version": 1, "new_value": {"x": 1}}
    )
    assert response.status_code == 409, response.text


def test_metrics_rank_hot_shards_by_commits_and_share_one_clock(console, browser):  # noqa: F811
    from playwright.sync_api import expect

    executor = console["executor"]
    shard_create(
        actor=Actor("treasurer"),
        shard_id="contested",
        shard_type="decision",
        initial_value={"x": 0},
        reversible=True,
    )
    executor.commit("contested", {"x": 1})  # contested: 1 commit, 6 conflicts
    for _ in range(6):
        stale_commit(executor, "contested")
    for n in range(3):  # budget: 3 commits
        executor.commit("budget", {"limit": n, "note": "x"})
    page = browser(console["url"], "rita", path="/dashboard/metrics/")
    assert page.url.endswith("/dashboard/metrics")  # the slashed address is no 404
    expect(page.locator("#tile-p99").locator("xpath=..")).to_contain_text(
        "measured inside the server"
    )
    rows = page.locator("#hot-shards tbody tr[data-shard-id]")
    expect(rows).to_have_count(2, timeout=8000)
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.shardId)") == ["budget", "contested"]
    # Let the page poll a few times, then every chart spans the same seconds.
    until(page, "Number(document.body.dataset.metricsDrawn || 0) >= 3", seconds=15)
    ranges = [page.evaluate(f"Chart.getChart('{chart}').data.labels.slice()") for chart in CHARTS]
    assert ranges[0], "no seconds drawn"
    assert all(r == ranges[0] for r in ranges), [(r[0], r[-1], len(r)) for r in ranges]


def test_a_shards_history_links_an_approved_commit_to_its_approval_and_approvers(
    console,  # noqa: F811
    browser,  # noqa: F811
):
    from playwright.sync_api import expect

    approval_id = console["executor"].request(
        "treasury", {"balance": 900, "payments": [], "owner": "finance"}, "Pay rent"
    )
    approval = approval_decide(
        approval_id=approval_id,
        decider=Decider.user(User.objects.get(username="rita")),
        approve=True,
        reason="",
    )
    assert approval.status == "committed"
    page = browser(console["url"], "sam", path="/dashboard/shards/treasury")
    row = page.locator("#history tbody tr", has_text=f"v{approval.commit['version']}")
    link = row.locator(f"a[href='/console/approvals/{approval_id}']")
    expect(link).to_have_count(1)
    expect(row).to_contain_text("by rita")
    assert httpx.get(f"{console['url']}/dashboard/", follow_redirects=False).status_code in (
        301,
        302,
    )
