"""Every console and dashboard page at desktop and phone width: no sideways
scroll at 390 px, and axe-core finds nothing critical or serious."""

from __future__ import annotations

import pytest

from access.identity import Actor
from shards.services import shard_create
from tests.approvals.a11y import axe_violations, report

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

WIDTHS = [(1440, 900), (390, 844)]


@pytest.fixture
def busy(console):
    """A queue with text, nested and stale requests, and a quorum of two."""
    executor = console["executor"]
    shard_create(
        actor=Actor("treasurer"),
        shard_id="policy.retention.eu-west.customer-data",
        shard_type="decision",
        initial_value={
            "text": "Keep customer data for 30 days.\nRefunds above EUR 1,000 need two signatures.",
            "owner": "legal",
        },
        reversible=False,
    )
    ids = {
        "text": executor.request(
            "policy.retention.eu-west.customer-data",
            {
                "text": "Keep customer data for 90 days.\nRefunds above EUR 10,000 need two signatures.",
                "owner": "legal",
            },
            "Extend retention to 90 days and raise the refund threshold for the EU west region",
            metadata={
                "tool": "policy.update",
                "ticket": "LEGAL-1234",
                "links": ["https://example.invalid/LEGAL-1234"],
            },
        ),
        "nested": executor.request(
            "treasury",
            {
                "balance": 750,
                "payments": [{"to": "acme", "amount": 250, "memo": "invoice 42 " * 12}],
                "owner": "finance",
            },
            "Pay ACME invoice 42",
        ),
        "quorum": executor.request("board", {"seats": 5}, "Add two board seats"),
        "stale": executor.request("budget", {"limit": 900, "note": "start"}, "Raise the limit"),
    }
    executor.commit("budget", {"limit": 150, "note": "moved"})
    return ids


def pages(url: str, ids: dict[str, str]) -> dict[str, str]:
    return {
        "queue": "/console/",
        "detail-text": f"/console/approvals/{ids['text']}",
        "detail-nested": f"/console/approvals/{ids['nested']}",
        "detail-stale": f"/console/approvals/{ids['stale']}",
        "history": "/console/history",
        "shards": "/dashboard/shards",
        "shard": "/dashboard/shards/treasury",
        "metrics": "/dashboard/metrics",
    }


@pytest.mark.parametrize("width, height", WIDTHS, ids=["desktop", "phone"])
def test_pages_fit_the_width_and_pass_axe(console, busy, browser, width, height):
    from playwright.sync_api import expect

    page = browser(console["url"], "rita", width=width, height=height)
    failures = []
    for name, path in pages(console["url"], busy).items():
        page.goto(console["url"] + path)
        page.wait_for_load_state("networkidle")
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        if overflow > 0:
            wide = page.evaluate(
                """() => [...document.querySelectorAll('body *')]
                  .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
                  .slice(0, 5).map(e => e.tagName + '.' + e.className)"""
            )
            failures.append(f"{name}: scrolls sideways by {overflow}px ({wide})")
        found = axe_violations(page)
        if found:
            failures.append(f"{name}:\n{report(found)}")
        if name == "queue" or name.startswith("detail"):
            shot = console["shots"] / f"{name}-{width}x{height}.png"
            page.screenshot(path=str(shot))
            page.screenshot(path=str(shot.with_suffix(".full.png")), full_page=True)
    assert not failures, "\n".join(failures)
    if width < 700:
        page.goto(console["url"] + "/console/")
        nav = page.locator("#site-nav")
        expect(nav).to_be_hidden()
        page.click(".nav-toggle")
        expect(nav).to_be_visible()
        expect(page.locator(".nav-toggle")).to_have_attribute("aria-expanded", "true")
        # Queue rows are cards: one column, as wide as the page.
        row = page.locator("#queue-rows tr[data-approval-id]").first
        box = row.bounding_box()
        assert box["width"] > 300 and box["x"] + box["width"] <= width
        assert page.locator("#queue thead").is_hidden()


def test_the_axe_check_does_fail_on_the_findings_the_issue_reported(console, busy, browser):
    """A check that cannot fail proves nothing: put back a diff marked up as a
    table with no rows and an unreachable scrolling box, and axe must object."""
    page = browser(console["url"], "rita")
    page.goto(f"{console['url']}/console/approvals/{busy['nested']}")
    assert axe_violations(page) == []
    page.evaluate(
        """() => {
          const d = document.querySelector('.diff');
          d.setAttribute('role', 'table');
          d.removeAttribute('tabindex');
          d.style.overflow = 'auto'; d.style.maxHeight = '40px';
          const img = document.createElement('img'); img.src = '/static/none.png';
          document.querySelector('main').appendChild(img);
        }"""
    )
    found = {v["id"] for v in axe_violations(page)}
    assert "image-alt" in found, found
    assert found & {"aria-required-children", "scrollable-region-focusable"}, found
