"""Safe decisions in a real Chromium: drift, confirmation, quorum, concurrent officers."""

from __future__ import annotations

import re

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import Approval

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def decide_elsewhere(url: str, username: str, approval_id: str, action: str, reason: str = ""):
    """Another officer decides through the live server (its own session, its own CSRF)."""
    client = Client()
    client.force_login(User.objects.get(username=username))
    session = client.cookies["sessionid"].value
    with httpx.Client(base_url=url, cookies={"sessionid": session}) as http:
        page = http.get(f"/console/approvals/{approval_id}").text
        token = page.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
        response = http.post(
            f"/console/approvals/{approval_id}/decide",
            data={"action": action, "reason": reason, "csrfmiddlewaretoken": token},
            headers={"Referer": url + "/"},
        )
        assert response.status_code == 302, response.text


def test_an_open_page_gets_the_drift_banner_and_reject_as_stale_becomes_the_main_action(
    console, browser
):
    from playwright.sync_api import expect

    url, executor = console["url"], console["executor"]
    approval_id = executor.request("budget", {"limit": 900, "note": "start"}, "Raise the limit")
    page = browser(url, "rita", path=f"/console/approvals/{approval_id}")
    expect(page.locator("#approve")).to_be_visible()
    expect(page.locator("#reject-stale")).to_be_hidden()
    page.fill("#reason", "Checking with finance first")

    executor.commit("budget", {"limit": 150, "note": "moved"})  # the shard moves on

    banner = page.locator("#live-banner")
    expect(banner).to_contain_text("moved on to v2", timeout=5000)
    expect(page.locator("#reject-stale")).to_be_visible()
    expect(page.locator("#approve")).to_be_hidden()
    expect(page.locator("#stale-note")).to_contain_text("can no longer apply")
    expect(page.locator("#three-values")).to_have_attribute("open", "")
    expect(page.locator("#shard-version")).to_have_text("v2")
    assert page.input_value("#reason") == "Checking with finance first"  # no reload

    # After a reload the stale form is what the server renders, too.
    page.reload()
    expect(page.locator("#reject-stale")).to_be_visible()
    expect(page.locator("#approve")).to_be_hidden()
    page.fill("#reason", "")
    page.click("#reject-stale")  # the server writes the reason saying why
    expect(page.locator("#approval-status")).to_have_text("rejected")
    assert Approval.objects.get(pk=approval_id).reason.startswith("Stale:")


def test_a_stale_request_offers_no_approval_only_reject_as_stale_with_its_reason(console, browser):
    from playwright.sync_api import expect

    url, executor = console["url"], console["executor"]
    approval_id = executor.request("budget", {"limit": 900, "note": "start"}, "Raise the limit")
    executor.commit("budget", {"limit": 150, "note": "moved"})
    page = browser(url, "rita", path=f"/console/approvals/{approval_id}")
    callout = page.locator("#stale-callout")
    expect(callout).to_contain_text("This request can no longer apply")
    expect(callout).to_contain_text("the agent must ask again")
    expect(page.locator("#stale-note")).to_be_visible()
    expect(page.locator("#stale-note")).to_contain_text("can no longer apply")
    # Nothing on the page approves it, or says approving "commits".
    expect(page.locator("#approve-anyway")).to_have_count(0)
    expect(page.locator("#override-stale")).to_have_count(0)
    expect(page.locator("#confirm-approve")).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("approve", re.I))).to_have_count(0)
    assert "commits" not in page.locator("body").inner_text()
    expect(page.locator("#edit-box")).to_be_hidden()
    page.keyboard.press("a")  # the approve key lands on the one thing left to do
    expect(page.locator("#reject-stale")).to_be_focused()
    assert Approval.objects.get(pk=approval_id).status == "pending"

    expect(page.locator("#reason")).to_have_value("")
    page.click("#reject-stale")
    expect(page.locator("#approval-status")).to_have_text("rejected")
    approval = Approval.objects.get(pk=approval_id)
    assert approval.status == "rejected"
    assert approval.reason == (
        "Stale: the shard moved on from v1 (now v2) before this was decided; "
        "ask again against the current value."
    )
    assert approval.decisions.get().reason == approval.reason
    page.screenshot(
        path=str(console["shots"] / "console-detail-rejected-stale.png"), full_page=True
    )


def test_approving_asks_for_confirmation_and_the_keyboard_can_cancel_or_confirm(console, browser):
    from playwright.sync_api import expect

    url, executor = console["url"], console["executor"]
    approval_id = executor.request(
        "treasury",
        {"balance": 750, "payments": [{"to": "acme", "amount": 250}], "owner": "finance"},
        "Pay ACME invoice 42",
    )
    page = browser(url, "rita", path=f"/console/approvals/{approval_id}")
    page.fill("#reason", "Invoice matches")
    page.click("#approve")
    dialog = page.locator("#confirm-approve")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("irreversible")
    expect(page.locator("#confirm-cancel")).to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert Approval.objects.get(pk=approval_id).status == "pending"

    page.focus("#approve")
    page.keyboard.press("Enter")  # one Enter only opens the dialog
    expect(dialog).to_be_visible()
    assert Approval.objects.get(pk=approval_id).status == "pending"
    page.keyboard.press("Tab")
    expect(page.locator("#confirm-yes")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#approval-status")).to_have_text("committed")
    assert Approval.objects.get(pk=approval_id).status == "committed"


def test_rejecting_without_a_reason_is_stopped_next_to_the_field(console, browser):
    from playwright.sync_api import expect

    url, executor = console["url"], console["executor"]
    approval_id = executor.request("budget", {"limit": 5, "note": "start"}, "Cut the limit")
    page = browser(url, "rita", path=f"/console/approvals/{approval_id}")
    page.click("#reject")
    expect(page.locator("#reason-error")).to_be_visible()
    expect(page.locator("#reason")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#reason")).to_be_focused()
    assert Approval.objects.get(pk=approval_id).status == "pending"
    page.fill("#reason", "Too low")
    expect(page.locator("#reason-error")).to_be_hidden()
    page.click("#reject")
    expect(page.locator("#approval-status")).to_have_text("rejected")


def test_quorum_progress_shows_and_an_officer_who_voted_sees_the_vote_not_the_form(
    console, browser
):
    from playwright.sync_api import expect

    url, executor = console["url"], console["executor"]
    approval_id = executor.request("board", {"seats": 5}, "Add two board seats")
    page = browser(url, "sam", path=f"/console/approvals/{approval_id}")
    expect(page.locator("#quorum")).to_contain_text("0 of 2 approvals")
    page.fill("#reason", "I am still reading")

    decide_elsewhere(url, "rita", approval_id, "approve", "fine by me")

    expect(page.locator("#quorum")).to_contain_text("1 of 2 approvals, by rita", timeout=5000)
    expect(page.locator("#live-banner")).to_contain_text("quorum")
    assert page.input_value("#reason") == "I am still reading"
    page.goto(f"{url}/console/")
    expect(page.locator(f"tr[data-approval-id='{approval_id}'] .quorum")).to_have_text("1 of 2")

    rita = browser(url, "rita", path=f"/console/approvals/{approval_id}")
    expect(rita.locator("#my-vote")).to_contain_text("You approved this")
    expect(rita.locator("#decide-form")).to_have_count(0)


def test_a_second_officers_decision_shows_up_without_losing_typed_text(console, browser):
    from playwright.sync_api import expect

    url, executor = console["url"], console["executor"]
    approval_id = executor.request("budget", {"limit": 1, "note": "start"}, "Cut to one")
    page = browser(url, "sam", path=f"/console/approvals/{approval_id}")
    page.fill("#reason", "A long reason I was typing")

    decide_elsewhere(url, "rita", approval_id, "reject", "no way")

    expect(page.locator("#live-banner")).to_contain_text("Someone else decided", timeout=5000)
    expect(page.locator("#approval-status")).to_have_text("rejected")
    expect(page.locator("#reject")).to_be_disabled()
    expect(page.locator("#approve")).to_be_disabled()
    assert page.input_value("#reason") == "A long reason I was typing"


def test_an_open_page_shows_when_the_request_expires_and_keeps_the_typed_reason(console, browser):
    from playwright.sync_api import expect

    url, executor = console["url"], console["executor"]
    approval_id = executor.request(
        "budget", {"limit": 2, "note": "start"}, "Expires soon", ttl_seconds=10
    )
    page = browser(url, "rita", path=f"/console/approvals/{approval_id}")
    page.fill("#reason", "Half-written thoughts")
    expect(page.locator("#live-banner")).to_contain_text("expired", timeout=15000)
    expect(page.locator("#approve")).to_be_disabled()
    expect(page.locator("#reject")).to_be_disabled()
    assert page.input_value("#reason") == "Half-written thoughts"
    # The server marks it too (the live server sweeps while sockets are open).
    expect(page.locator("#approval-status")).to_have_text("expired", timeout=8000)
