"""Decisions beyond yes or no in the console, in a real Chromium (issue 28):
approve with edits (the edit's change against the proposal is shown before the
confirmation), an edit that is not JSON or that the schema refuses (the request
stays pending), and request changes, then a new request linked both ways."""

from __future__ import annotations

import json

import pytest

from access.identity import Actor
from approvals.models import Approval
from shards.models import Shard
from shards.services import shard_create
from tests.approvals.a11y import axe_violations

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_an_officer_edits_the_value_sees_its_change_and_commits_it(console, browser):
    from playwright.sync_api import expect

    approval_id = console["executor"].request("budget", {"limit": 250, "note": "start"}, "Raise")
    page = browser(console["url"], "rita", path=f"/console/approvals/{approval_id}")
    page.click("#edit-box summary")
    editor = page.locator("#edited-value-input")
    assert json.loads(editor.input_value()) == {"limit": 250, "note": "start"}
    editor.fill(json.dumps({"limit": 180, "note": "start"}))
    page.click("#edit-preview")
    # The confirmation page: the edit against the proposal, path by path.
    row = page.locator("#edit-summary tr[data-path='/limit']")
    expect(row.locator(".val.old")).to_have_text("250")
    expect(row.locator(".val.new")).to_have_text("180")
    assert Approval.objects.get(pk=approval_id).status == "pending"  # nothing decided yet
    assert axe_violations(page) == []
    page.click("#edit-confirm")
    expect(page.locator("#approval-status")).to_have_text("committed")
    expect(page.locator("#edited-by")).to_contain_text("user:rita")
    expect(page.locator("#summary tr[data-path='/limit'] .val.new")).to_have_text("180")
    approval = Approval.objects.get(pk=approval_id)
    assert (approval.edited_value, approval.proposed_value["limit"]) == (
        {"limit": 180, "note": "start"},
        250,
    )
    assert Shard.objects.get(pk="budget").value == {"limit": 180, "note": "start"}


def test_an_edit_that_is_not_json_or_breaks_the_schema_is_shown_and_decides_nothing(
    console, browser
):
    from playwright.sync_api import expect

    shard_create(
        actor=Actor("treasurer"),
        shard_id="limits",
        shard_type="decision",
        initial_value={"limit": 1},
        value_schema={
            "type": "object",
            "properties": {"limit": {"type": "integer", "maximum": 500}},
        },
    )
    approval_id = console["executor"].request("limits", {"limit": 400}, "Raise the limit")
    page = browser(console["url"], "rita", path=f"/console/approvals/{approval_id}")
    page.click("#edit-box summary")
    page.fill("#edited-value-input", '{"limit": 300,')
    page.click("#edit-preview")
    expect(page.locator("#edit-error")).to_contain_text("Not JSON")
    expect(page.locator("#edit-again-value")).to_have_value('{"limit": 300,')
    assert page.locator("#edit-confirm").count() == 0
    page.fill("#edit-again-value", '{"limit": 9000}')
    page.click("#edit-again")
    expect(page.locator("#edit-error")).to_contain_text("SCHEMA_VIOLATION")
    assert axe_violations(page) == []
    approval = Approval.objects.get(pk=approval_id)
    assert (approval.status, approval.edited, approval.decisions.count()) == ("pending", False, 0)
    assert Shard.objects.get(pk="limits").version == 1


def test_an_officer_requests_changes_and_the_next_request_is_linked_both_ways(console, browser):
    from playwright.sync_api import expect

    executor = console["executor"]
    first = executor.request("budget", {"limit": 900, "note": "start"}, "Raise a lot")
    page = browser(console["url"], "rita", path=f"/console/approvals/{first}")
    page.click("#changes-box summary")
    page.click("#request-changes")  # no message: the browser's required field holds it
    assert Approval.objects.get(pk=first).status == "pending"
    page.fill("#changes-message", "At most 500, please")
    page.click("#request-changes")
    expect(page.locator("#approval-status")).to_have_text("changes requested")
    assert Approval.objects.get(pk=first).reason == "At most 500, please"

    second = executor.request(
        "budget", {"limit": 500, "note": "start"}, "Raise less", previous_id=first
    )
    page.goto(f"{console['url']}/console/approvals/{second}")
    expect(page.locator("#follows a")).to_have_text(first)
    expect(page.locator("#follows")).to_contain_text("At most 500, please")
    page.click("#follows a")
    expect(page.locator("#followed-by a")).to_have_text(second)
    assert axe_violations(page) == []


def test_an_edit_under_a_quorum_is_the_editors_vote_and_the_first_officer_approves_again(
    console, browser
):
    """Quorum with an edit, in the console: Rita approves 5 seats, Sam edits to 4.
    Rita's vote was for 5, so it stops counting and her decide form comes back,
    showing the edited value; her second approval reaches the quorum of two and
    4 is written, never 5."""
    from playwright.sync_api import expect

    url = console["url"]
    approval_id = console["executor"].request("board", {"seats": 5}, "Add two board seats")
    path = f"/console/approvals/{approval_id}"
    rita = browser(url, "rita", path=path)
    rita.click("#approve")
    rita.click("#confirm-yes")
    expect(rita.locator("#quorum")).to_contain_text("1 of 2 approvals, by rita")
    expect(rita.locator("#my-vote")).to_contain_text("You approved this")

    sam = browser(url, "sam", path=path)
    sam.click("#edit-box summary")
    sam.fill("#edited-value-input", json.dumps({"seats": 4}))
    sam.click("#edit-preview")
    expect(sam.locator("#edit-summary tr[data-path='/seats'] .val.new")).to_have_text("4")
    sam.click("#edit-confirm")
    expect(sam.locator("#approval-status")).to_have_text("pending")
    expect(sam.locator("#quorum")).to_contain_text("1 of 2 approvals, by sam")
    expect(sam.locator("#edited-by")).to_contain_text("user:sam")
    assert Shard.objects.get(pk="board").version == 1

    rita.reload()
    expect(rita.locator("#my-vote")).to_have_count(0)  # her vote no longer counts
    expect(rita.locator("#edited-by")).to_contain_text("user:sam")
    rita.click("#approve")
    rita.click("#confirm-yes")
    expect(rita.locator("#approval-status")).to_have_text("committed")
    expect(rita.locator("#quorum")).to_contain_text("2 of 2 approvals")
    assert Shard.objects.get(pk="board").value == {"seats": 4}
    approval = Approval.objects.get(pk=approval_id)
    # A plain approval's kind is blank; Rita's first no longer counts.
    assert [(d.kind, d.counts) for d in approval.decisions.order_by("created_at")] == [
        ("", False),
        ("edit", True),
        ("", True),
    ]
