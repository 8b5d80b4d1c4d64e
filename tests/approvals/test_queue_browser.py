"""Queue triage in a real Chromium: order, count, filters, shortcuts, bulk reject."""

from __future__ import annotations

import re
import time

import pytest

from approvals.models import Approval

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def ids_in_queue(page) -> list[str]:
    return page.eval_on_selector_all(
        "#queue-rows tr[data-approval-id]", "rows => rows.map(r => r.dataset.approvalId)"
    )


def test_the_queue_is_ordered_by_time_left_and_shows_seconds_and_a_preview(console, browser):
    from playwright.sync_api import expect

    executor = console["executor"]
    late = executor.request("budget", {"limit": 1, "note": "start"}, "Late", ttl_seconds=3600)
    soon = executor.request("budget", {"limit": 2, "note": "start"}, "Soon", ttl_seconds=120)
    middle = executor.request("budget", {"limit": 3, "note": "x"}, "Middle", ttl_seconds=600)
    page = browser(console["url"], "rita")
    assert ids_in_queue(page) == [soon, middle, late]
    row = page.locator(f"tr[data-approval-id='{middle}']")
    expect(row.locator("time.relative")).to_have_text(re.compile(r"^\d{1,2} s ago$"))
    # The first change of the server's patch, and how many more there are.
    expect(row.locator(".preview")).to_have_text(
        re.compile(r'changed (/limit 100 → 3|/note "start" → "x") \+1 more')
    )
    page.select_option("select[name=sort]", "newest")
    expect(page.locator("#queue-rows tr[data-approval-id]").first).to_have_attribute(
        "data-approval-id", middle
    )
    assert ids_in_queue(page) == [middle, soon, late]


def test_the_pending_count_is_in_the_navigation_and_the_tab_title_and_follows_live(
    console, browser
):
    from playwright.sync_api import expect

    executor = console["executor"]
    executor.request("budget", {"limit": 7, "note": "start"}, "One")
    page = browser(console["url"], "rita", path="/console/history")
    expect(page.locator("#pending-count")).to_have_text("1")
    assert page.title().startswith("(1) Approval history")
    executor.request("budget", {"limit": 8, "note": "start"}, "Two")
    expect(page.locator("#pending-count")).to_have_text("2", timeout=5000)
    expect(page).to_have_title(re.compile(r"^\(2\) Approval history"))
    page.goto(f"{console['url']}/dashboard/metrics")
    expect(page.locator("#pending-count")).to_have_text("2")


def test_filters_narrow_the_queue(console, browser):
    from playwright.sync_api import expect

    executor = console["executor"]
    on_budget = executor.request("budget", {"limit": 9, "note": "start"}, "Budget change")
    on_treasury = executor.request(
        "treasury", {"balance": 1, "payments": [], "owner": "finance"}, "Treasury change"
    )
    executor.commit("budget", {"limit": 10, "note": "moved"})  # makes on_budget stale
    page = browser(console["url"], "rita")
    assert set(ids_in_queue(page)) == {on_budget, on_treasury}
    page.fill("input[name=shard]", "treas")
    page.press("input[name=shard]", "Enter")
    expect(page.locator("#queue-rows tr[data-approval-id]")).to_have_count(1)
    assert ids_in_queue(page) == [on_treasury]
    page.fill("input[name=shard]", "")
    page.check("input[name=stale]")
    expect(page.locator(f"tr[data-approval-id='{on_treasury}']")).to_have_count(0)
    assert ids_in_queue(page) == [on_budget]
    page.uncheck("input[name=stale]")
    page.select_option("select[name=within]", "5")
    expect(page.locator("#queue-rows tr.empty")).to_contain_text("matches these filters")


def test_keyboard_shortcuts_decide_a_request_and_move_to_the_next(console, browser):
    from playwright.sync_api import expect

    executor = console["executor"]
    first = executor.request("budget", {"limit": 11, "note": "start"}, "First", ttl_seconds=300)
    second = executor.request("budget", {"limit": 12, "note": "start"}, "Second", ttl_seconds=900)
    page = browser(console["url"], "rita")
    page.keyboard.press("?")
    expect(page.locator("#shortcuts")).to_be_visible()
    expect(page.locator("#shortcuts")).to_contain_text("approve (asks for confirmation)")
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    expect(page.locator(f"tr[data-approval-id='{first}']")).to_have_class(re.compile("selected"))
    page.keyboard.press("j")
    page.keyboard.press("k")
    page.keyboard.press("a")  # approve the selected one: the page opens with the confirmation
    expect(page.locator("#confirm-approve")).to_be_visible()
    expect(page.locator("#summary tr[data-path='/limit'] .val.new")).to_have_text("11")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.locator("#approval-status")).to_have_text("committed")
    assert Approval.objects.get(pk=first).status == "committed"
    page.keyboard.press("n")  # the next pending request
    expect(page.locator("#summary tr[data-path='/limit'] .val.new")).to_have_text("12")
    page.keyboard.press("r")
    expect(page.locator("#reason")).to_be_focused()
    page.keyboard.type("Superseded by the first")
    page.locator("#reason").blur()
    page.keyboard.press("r")
    expect(page.locator("#approval-status")).to_have_text("rejected")
    # The second is stale now (the first moved the shard): rejected as stale, the
    # server's reason first, then the officer's words.
    reason = Approval.objects.get(pk=second).reason
    assert reason.startswith("Stale: the shard moved on from v1 (now v2)"), reason
    assert reason.endswith(" Superseded by the first"), reason


def test_bulk_reject_takes_one_reason_for_the_selected_requests(console, browser):
    from playwright.sync_api import expect

    executor = console["executor"]
    ids = [executor.request("budget", {"limit": n, "note": "start"}, f"Spam {n}") for n in range(3)]
    page = browser(console["url"], "rita")
    page.check(f"tr[data-approval-id='{ids[0]}'] input[name=ids]")
    page.check(f"tr[data-approval-id='{ids[2]}'] input[name=ids]")
    page.click("#bulk-reject")  # no reason yet
    expect(page.locator("#bulk-error")).to_be_visible()
    assert Approval.objects.filter(status="rejected").count() == 0
    page.fill("#bulk-reason", "Duplicate requests from a looping agent")
    page.click("#bulk-reject")
    expect(page.locator(".msg.success")).to_contain_text("Rejected 2 requests")
    assert ids_in_queue(page) == [ids[1]]
    reasons = set(Approval.objects.filter(status="rejected").values_list("reason", flat=True))
    assert reasons == {"Duplicate requests from a looping agent"}


def until(page, expression: str, *, seconds: float) -> None:
    """Polls ``expression`` with page.evaluate. Not wait_for_function: its poller
    evaluates strings with eval, which the console's CSP (rightly) forbids."""
    deadline = time.monotonic() + seconds
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        time.sleep(0.05)


def test_an_officer_who_allowed_notifications_gets_one_for_a_new_request(console, browser):
    from playwright.sync_api import expect

    page = browser(console["url"], "rita", path="/console/history")
    page.context.grant_permissions(["notifications"], origin=console["url"])
    # Record what the page asks the browser to show (and still show it).
    page.evaluate(
        """() => {
          window.shown = [];
          const Real = window.Notification;
          window.Notification = function (title, options) {
            window.shown.push({ title, body: options.body, tag: options.tag });
            return new Real(title, options);
          };
          window.Notification.permission = "granted";
        }"""
    )
    # The request must come after the page's live socket is open, or nothing tells it.
    until(page, "document.body.dataset.live === 'open'", seconds=10)
    approval_id = console["executor"].request("budget", {"limit": 3, "note": "n"}, "Notify")
    until(page, "window.shown.length > 0", seconds=5)
    shown = page.evaluate("window.shown")
    assert shown[0]["tag"] == approval_id
    assert "budget" in shown[0]["body"]
    page.goto(f"{console['url']}/console/")
    expect(page.locator("#notifications-state")).to_contain_text("notifications are on")
