"""The console can never hide what is approved (issue 28, console defect 1), in a
real Chromium: an agent's long description once pushed the change 2,500 px below
the fold while the sticky Approve stayed on screen, the confirmation named only
the shard and version, and `j` `a` Tab Enter approved from the queue without the
change ever being in view."""

from __future__ import annotations

import pytest

from approvals.models import Approval

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# An agent that writes a wall of text, or tries to make the page say something else.
# 4,000 characters is the most the API takes.
LONG = (("Routine top-up, nothing to see here. " * 35 + "\n") * 3 + "x" * 400)[:4000]


def top_in_view(page, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    height = page.viewport_size["height"]
    return box is not None and 0 <= box["y"] < height - 40


@pytest.mark.parametrize("width,height", [(1440, 900), (390, 844)])
def test_a_long_description_never_pushes_the_change_below_the_fold(console, browser, width, height):
    from playwright.sync_api import expect

    assert len(LONG) == 4000
    approval_id = console["executor"].request("budget", {"limit": 250, "note": "start"}, LONG)
    page = browser(
        console["url"], "rita", width=width, height=height, path=f"/console/approvals/{approval_id}"
    )
    # The heading is the server's words, not the agent's.
    expect(page.locator("h1")).to_have_text("Change to budget")
    row = page.locator("#summary tr[data-path='/limit']")
    expect(row.locator(".val.old")).to_have_text("100")
    expect(row.locator(".val.new")).to_have_text("250")
    assert top_in_view(page, "#summary"), page.locator("#summary").bounding_box()
    # The description is all there, in its own box below the change, scrolled within it.
    description = page.locator("#description-text")
    expect(description).to_contain_text("Routine top-up")
    box = description.bounding_box()
    summary = page.locator("#summary").bounding_box()
    assert box is not None and summary is not None
    assert box["y"] > summary["y"] and box["height"] < 160, box
    assert page.evaluate("document.getElementById('description-text').scrollHeight") > 400
    page.screenshot(path=str(console["shots"] / f"change-first-{width}.png"))


def test_the_confirmation_restates_each_change_old_to_new(console, browser):
    from playwright.sync_api import expect

    approval_id = console["executor"].request(
        "treasury",
        {"balance": 250, "payments": [{"to": "ACME", "amount": 750}], "owner": "finance"},
        "Pay ACME",
    )
    page = browser(console["url"], "rita", path=f"/console/approvals/{approval_id}")
    page.click("#approve")
    dialog = page.locator("#confirm-approve")
    expect(dialog).to_be_visible()
    balance = dialog.locator("#confirm-changes li[data-path='/balance']")
    expect(balance.locator(".val.old")).to_have_text("1000")
    expect(balance.locator(".val.new")).to_have_text("250")
    expect(dialog.locator("#confirm-changes li[data-path='/payments/0']")).to_contain_text("ACME")
    expect(dialog).to_contain_text("cannot be undone")
    page.click("#confirm-cancel")
    assert Approval.objects.get(pk=approval_id).status == "pending"


def test_approving_from_the_queue_shows_the_change_before_anything_is_committed(console, browser):
    from playwright.sync_api import expect

    approval_id = console["executor"].request("budget", {"limit": 7, "note": "start"}, LONG)
    page = browser(console["url"], "rita")
    page.keyboard.press("j")
    page.keyboard.press("a")
    dialog = page.locator("#confirm-approve")
    expect(dialog).to_be_visible()
    # The keys that once approved blind now approve with the change in front of the
    # officer: in the dialog, path by path, and on the page behind it.
    limit = dialog.locator("#confirm-changes li[data-path='/limit']")
    expect(limit.locator(".val.old")).to_have_text("100")
    expect(limit.locator(".val.new")).to_have_text("7")
    assert top_in_view(page, "#summary")
    assert Approval.objects.get(pk=approval_id).status == "pending"
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.locator("#approval-status")).to_have_text("committed")
