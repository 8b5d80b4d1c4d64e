"""A diff made for review, in a real Chromium."""

from __future__ import annotations

import pytest

from access.identity import Actor
from shards.services import shard_create

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

POLICY = (
    "Customer data is kept for 30 days.\n"
    "Refunds above EUR 1,000 need a second signature.\n"
    "Audit logs are exported weekly.\n"
    "Nothing else changes."
)


def test_a_text_change_shows_the_changed_words_and_real_line_breaks(console, browser):
    from playwright.sync_api import expect

    shard_create(
        actor=Actor("treasurer"),
        shard_id="policy",
        shard_type="decision",
        initial_value={"text": POLICY, "owner": "legal"},
        reversible=False,
    )
    new = POLICY.replace("30 days", "90 days").replace("EUR 1,000", "EUR 10,000")
    new = new.replace("Audit logs are exported weekly.\n", "")
    approval_id = console["executor"].request(
        "policy", {"text": new, "owner": "legal"}, "Update the retention policy"
    )
    page = browser(console["url"], "rita", path=f"/console/approvals/{approval_id}")
    row = page.locator("#summary tr[data-path='/text']")
    expect(row.locator(".op")).to_have_text("changed")
    diff = row.locator(".text-diff")
    # Paired lines mark the changed words; a removed line is marked whole.
    expect(diff.locator(".tl.del mark.wd")).to_have_text(
        ["30", "1", "Audit logs are exported weekly."]
    )
    expect(diff.locator(".tl.add mark.wd")).to_have_text(["90", "10"])
    expect(diff.locator(".tl.del").nth(2)).to_contain_text("Audit logs are exported weekly.")
    # Newlines are line breaks, not "\n" inline.
    assert "\\n" not in diff.inner_text()
    assert diff.locator(".tl").count() >= 5


def test_a_nested_change_shows_its_path_and_the_decision_stays_in_reach(console, browser):
    from playwright.sync_api import expect

    services = {
        f"svc{n:03}": {"replicas": 3, "port": 8000 + n, "image": f"registry/svc{n}:1.0"}
        for n in range(60)
    }
    shard_create(
        actor=Actor("treasurer"),
        shard_id="deploy",
        shard_type="decision",
        initial_value={"services": services, "regions": ["ES"]},
        reversible=False,
    )
    changed = {k: dict(v) for k, v in services.items()}
    changed["svc042"]["replicas"] = 6
    changed["svc007"]["image"] = "registry/svc7:" + "x" * 300  # a long value must wrap
    approval_id = console["executor"].request(
        "deploy", {"services": changed, "regions": ["ES", "RU"]}, "Scale svc042"
    )
    page = browser(console["url"], "rita", path=f"/console/approvals/{approval_id}")
    summary = page.locator("#summary")
    expect(summary.locator("tr[data-path='/services/svc042/replicas'] .val.old")).to_have_text("3")
    expect(summary.locator("tr[data-path='/services/svc042/replicas'] .val.new")).to_have_text("6")
    append = summary.locator("tr[data-path='/regions/1']")
    expect(append.locator(".op")).to_have_text("appended")
    expect(append).to_contain_text('"RU"')
    expect(page.locator(".diff .hunk")).to_contain_text(["/services/svc007", "/services/svc042"])
    # Nothing scrolls sideways, and the decision is on screen without scrolling.
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1440, width
    diff_overflow = page.evaluate(
        "(() => { const d = document.querySelector('.diff'); return d.scrollWidth - d.clientWidth; })()"
    )
    assert diff_overflow <= 1, diff_overflow
    approve = page.locator("#approve").bounding_box()
    assert approve is not None and approve["y"] >= 0 and approve["y"] + approve["height"] <= 900
    # ... although the page runs far below the fold, past the decision's place in it.
    assert page.evaluate("document.getElementById('history-parts').offsetTop") > 1500
    shots = console["shots"]
    page.screenshot(path=str(shots / "detail-nested-1440.png"))
