"""Routing in a real Chromium: an officer's queue holds only what they may
decide, and a request routed elsewhere is, at its address, a missing page."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from access.identity import Actor
from approvals.models import ApprovalRoute
from shards.services import shard_create

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def ids_in_queue(page) -> list[str]:
    return page.eval_on_selector_all(
        "#queue-rows tr[data-approval-id]", "rows => rows.map(r => r.dataset.approvalId)"
    )


def test_an_officer_outside_the_group_sees_only_what_they_may_decide(console, browser):
    from playwright.sync_api import expect

    payments = Group.objects.create(name="Payments approvers")
    User.objects.get(username="rita").groups.add(payments)
    ApprovalRoute.objects.create(shard_prefix="pay.", approver_group=payments)
    shard_create(
        actor=Actor("treasurer"),
        shard_id="pay.acme",
        shard_type="decision",
        initial_value={"paid": False},
    )
    executor = console["executor"]
    payment = executor.request("pay.acme", {"paid": True}, "Pay ACME invoice 42")
    float_ = executor.request("budget", {"limit": 5, "note": "start"}, "Lower the limit")

    sam = browser(console["url"], "sam")
    assert ids_in_queue(sam) == [float_]
    expect(sam.locator("#pending-count")).to_have_text("1")
    expect(sam.locator("body")).not_to_contain_text("Pay ACME")
    answer = sam.goto(f"{console['url']}/console/approvals/{payment}")
    assert answer is not None and answer.status == 404
    expect(sam.locator("body")).not_to_contain_text("Pay ACME")

    rita = browser(console["url"], "rita")
    assert sorted(ids_in_queue(rita)) == sorted([payment, float_])
    expect(rita.locator("#pending-count")).to_have_text("2")
    rita.goto(f"{console['url']}/console/approvals/{payment}")
    expect(rita.locator("h1")).to_contain_text("pay.acme")
    expect(rita.locator("body")).to_contain_text("Pay ACME invoice 42")
    rita.screenshot(path=str(console["shots"] / "routing-rita-detail.png"))
