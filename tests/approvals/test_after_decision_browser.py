"""Pages after a decision tell what happened (issue 28, console defects 2 and 4),
in a real Chromium: the officer who lost a simultaneous approve was shown a red
"the shard has moved on", about the very commit the winner's approval made; a
committed request compared its proposal with its own commit and read "No
change"; and a stale request hid what the agent had meant."""

from __future__ import annotations

import pytest

from approvals.models import Approval

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# The detail page's own form, read before the other officer decides and posted
# after, as a browser posts it: this page's socket would otherwise hear of the
# first approval and close the form, and the race is about a decision that was
# already on its way.
READ_FORM = """() => {
  const form = document.getElementById("decide-form");
  window.decision = new FormData(form);
  window.decision.set("action", "approve");
}"""
POST_DECISION = """async () => {
  const form = document.getElementById("decide-form");
  const options = {method: "POST", body: window.decision, credentials: "same-origin"};
  const answer = await fetch(form.getAttribute("action"), options);
  return answer.status + " " + answer.url + " | " + await answer.text();
}"""


def test_the_officer_who_loses_a_simultaneous_approve_is_told_who_won_and_that_it_applied(
    console, browser
):
    from playwright.sync_api import expect

    approval_id = console["executor"].request("budget", {"limit": 250, "note": "start"}, "Raise")
    path = f"/console/approvals/{approval_id}"
    rita = browser(console["url"], "rita", path=path)
    sam = browser(console["url"], "sam", path=path)
    sam.evaluate(READ_FORM)
    rita.click("#approve")
    rita.click("#confirm-yes")
    expect(rita.locator("#approval-status")).to_have_text("committed")
    answer = sam.evaluate(POST_DECISION)
    assert "rita approved this a moment before you" in answer, answer[-3000:]
    assert "the change is applied: budget is at version 2" in answer
    assert "moved on" not in answer
    assert "approve it anyway" not in answer
    approval = Approval.objects.get(pk=approval_id)
    assert approval.status == "committed" and approval.decisions.count() == 1


def test_a_committed_request_shows_the_change_it_applied_not_no_change(console, browser):
    from playwright.sync_api import expect

    approval_id = console["executor"].request("budget", {"limit": 250, "note": "start"}, "Raise")
    page = browser(console["url"], "rita", path=f"/console/approvals/{approval_id}")
    page.click("#approve")
    page.click("#confirm-yes")
    expect(page.locator("#approval-status")).to_have_text("committed")
    page.reload()
    expect(page.locator("#summary-title")).to_have_text("What it changed: v1 → v2 (applied)")
    row = page.locator("#summary tr[data-path='/limit']")
    expect(row.locator(".val.old")).to_have_text("100")
    expect(row.locator(".val.new")).to_have_text("250")
    expect(page.locator("#summary tr.empty")).to_have_count(0)
    expect(page.locator(".diff .line.del").first).to_contain_text("100")


def test_a_stale_request_shows_what_the_agent_meant_beside_what_approving_would_do(
    console, browser
):
    from playwright.sync_api import expect

    executor = console["executor"]
    approval_id = executor.request("budget", {"limit": 250, "note": "start"}, "Raise")
    executor.commit("budget", {"limit": 100, "note": "moved"})
    page = browser(console["url"], "rita", path=f"/console/approvals/{approval_id}")
    expect(page.locator("#stale-callout")).to_be_visible()
    # Against the current value, approving would also undo the note...
    now = page.locator("#summary")
    expect(now.locator("tr[data-path='/note']")).to_contain_text("moved")
    expect(now.locator("tr[data-path='/limit'] .val.new")).to_have_text("250")
    # ...which is not what the agent asked for: it asked for the limit only.
    meant = page.locator("#intended-summary")
    expect(meant.locator("tr[data-path='/limit'] .val.old")).to_have_text("100")
    expect(meant.locator("tr[data-path='/limit'] .val.new")).to_have_text("250")
    expect(meant.locator("tr[data-path='/note']")).to_have_count(0)
