"""Issue 28, console defect 3: the queue stopped at 200 rows in silence. With 207
pending, 7 could expire unseen. Now it says how many match, pages, keeps its
filters in the address bar, matches part of a requester, searches descriptions
and counts long time-left in days."""

from __future__ import annotations

import re

import pytest

from access.identity import Actor
from approvals.services import approval_request

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def ids_in_queue(page) -> list[str]:
    return page.eval_on_selector_all(
        "#queue-rows tr[data-approval-id]", "rows => rows.map(r => r.dataset.approvalId)"
    )


def test_a_queue_of_207_says_so_and_its_second_page_holds_the_last_7(console, browser):
    from playwright.sync_api import expect

    # In-process, as the API would (207 HTTP requests would only be slower).
    made = [
        approval_request(
            actor=Actor("executor"),
            shard_id="budget",
            proposed_value={"limit": n, "note": "start"},
            expected_version=1,
            description=f"Raise the limit to {n}",
            ttl_seconds=600 + n,  # time-left order is creation order
        ).id
        for n in range(207)
    ]
    page = browser(console["url"], "rita")
    expect(page.locator("#queue-count")).to_contain_text("207 pending requests")
    expect(page.locator("#queue-count")).to_contain_text("showing 1–200 of 207")
    assert ids_in_queue(page) == made[:200]
    page.locator("#queue-count a[rel=next]").click()
    expect(page.locator("#queue-count")).to_contain_text("showing 201–207 of 207")
    assert ids_in_queue(page) == made[200:]
    # Every request was on one page or the other: none lost, none twice.
    page.locator("#queue-count a[rel=prev]").click()
    expect(page.locator("#queue-count")).to_contain_text("showing 1–200 of 207")


def test_filters_are_in_the_address_and_match_part_of_a_requester_and_the_description(
    console, browser
):
    from playwright.sync_api import expect

    executor = console["executor"]
    refund = executor.request("budget", {"limit": 5, "note": "start"}, "Refund order 4411")
    executor.request("budget", {"limit": 6, "note": "start"}, "Raise the limit")
    page = browser(console["url"], "rita")
    expect(page.locator("#queue-count")).to_contain_text("2 pending requests")
    page.fill("input[name=q]", "order 44")
    page.press("input[name=q]", "Enter")
    expect(page.locator("#queue-count")).to_contain_text("1 pending request matches")
    assert ids_in_queue(page) == [refund]
    expect(page).to_have_url(re.compile(r"/console/\?.*q=order\+44"))
    # A reload (or a link sent to a colleague) shows the same queue.
    page.reload()
    page.wait_for_selector("body[data-live='open']")
    expect(page.locator("input[name=q]")).to_have_value("order 44")
    assert ids_in_queue(page) == [refund]
    page.fill("input[name=q]", "")
    page.fill("input[name=requester]", "xecut")  # part of "executor"
    page.press("input[name=requester]", "Enter")
    expect(page.locator("#queue-count")).to_contain_text("2 pending requests match")
    page.fill("input[name=requester]", "nobody")
    page.press("input[name=requester]", "Enter")
    expect(page.locator("#queue-rows tr.empty")).to_contain_text("matches these filters")


def test_a_week_long_request_counts_its_time_left_in_days(console, browser):
    from playwright.sync_api import expect

    executor = console["executor"]
    week = executor.request(
        "budget", {"limit": 7, "note": "start"}, "Slow one", ttl_seconds=7 * 86400
    )
    page = browser(console["url"], "rita")
    countdown = page.locator(f"tr[data-approval-id='{week}'] .countdown")
    expect(countdown).to_have_text(re.compile(r"^6d 23h$"))


def test_a_new_filter_on_page_two_starts_again_at_page_one_and_stays_there(console, browser):
    from playwright.sync_api import expect

    for n in range(203):
        approval_request(
            actor=Actor("executor"),
            shard_id="budget",
            proposed_value={"limit": n, "note": "start"},
            expected_version=1,
            description=f"Raise the limit to {n}",
            ttl_seconds=600 + n,
        )
    page = browser(console["url"], "rita", path="/console/?page=2")
    expect(page.locator("#queue-count")).to_contain_text("showing 201–203 of 203")
    page.fill("input[name=requester]", "executor")  # matches all 203
    page.press("input[name=requester]", "Enter")
    expect(page.locator("#queue-count")).to_contain_text("showing 1–200 of 203")
    # The periodic refresh (the same request as a live push) keeps page one.
    with page.expect_response(lambda r: "/console/queue/rows" in r.url) as refreshed:
        page.evaluate("document.body.dispatchEvent(new Event('zl-refresh'))")
    assert "page=" not in refreshed.value.url.replace("page=&", "").removesuffix("page=")
    page.wait_for_timeout(300)  # the swap after the response
    expect(page.locator("#queue-count")).to_contain_text("showing 1–200 of 203")
