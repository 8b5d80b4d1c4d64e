"""Issue 28, console defect 6: the agent's context (tool, arguments, links) sat
below the line diff, its links were dead text, and its markdown was shown raw.
Now the context comes right after the change summary, http(s) links are links
that open without this window, and markdown renders with no HTML let through."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HOSTILE = (
    "Pay **ACME** for [invoice 42](https://billing.example/inv/42).\n\n"
    "- one\n- two\n\n"
    '<script>document.title="pwned"</script><img src=x id=injected onerror="alert(1)">\n\n'
    "[click me](javascript:document.title='pwned') "
    "[data](data:text/html,<b>x</b>) ![pixel](https://tracker.example/p.png)\n\n"
    "# Approved by the CFO"
)


def test_the_agents_context_comes_before_the_line_diff_with_safe_links(console, browser):
    from playwright.sync_api import expect

    approval_id = console["executor"].request(
        "treasury",
        {"balance": 750, "payments": [{"to": "acme", "amount": 250}], "owner": "finance"},
        HOSTILE,
        metadata={
            "tool": "payments.send",
            "arguments": {"to": "acme", "amount": 250, "runbook": "https://wiki.example/pay"},
            "links": ["https://tickets.example/T-1", "javascript:alert(1)"],
            "trace": "http://trace.example/abc",
        },
    )
    page = browser(console["url"], "rita", path=f"/console/approvals/{approval_id}")

    def top(selector: str) -> float:
        return page.locator(selector).bounding_box()["y"]

    assert top("#change") < top("#metadata") < top("#line-diff")
    metadata = page.locator("#metadata")
    expect(metadata).to_contain_text("payments.send")
    links = metadata.locator("a")
    assert sorted(links.evaluate_all("as => as.map(a => a.href)")) == [
        "http://trace.example/abc",
        "https://tickets.example/T-1",
        "https://wiki.example/pay",
    ]
    assert set(links.evaluate_all("as => as.map(a => a.rel)")) == {"noopener noreferrer"}
    expect(metadata).to_contain_text("javascript:alert(1)")  # shown, as text only

    description = page.locator("#description-text")
    expect(description.locator("strong")).to_have_text("ACME")
    expect(description.locator("li")).to_have_count(2)
    invoice = description.locator("a", has_text="invoice 42")
    expect(invoice).to_have_attribute("href", "https://billing.example/inv/42")
    expect(invoice).to_have_attribute("rel", "noopener noreferrer")
    # No HTML of the agent's passes: the tags are shown as text, nothing runs,
    # only the http(s) link is a link, and no heading or image is made.
    expect(description).to_contain_text("<script>")
    assert description.locator("script, img, h1, h2, iframe").count() == 0
    assert page.locator("#injected").count() == 0
    hrefs = page.locator("#description-text a, #metadata a").evaluate_all(
        "as => as.map(a => a.getAttribute('href'))"
    )
    assert all(href.startswith(("http://", "https://")) for href in hrefs), hrefs
    assert page.title() != "pwned"
