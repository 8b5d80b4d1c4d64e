"""The console's "Approve, and approve the same kind for 1 hour" in real
Chromium (issue 28): the dialog states what the policy covers, confirming
approves the request and creates the policy, and the policy then approves a
request of the same kind but not a larger one."""

from __future__ import annotations

import pytest

from approvals.models import Approval, ApprovalPolicy
from audit.models import AuditEntry
from shards.models import Shard
from tests.approvals.a11y import axe_violations, report

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_approve_and_the_same_kind_for_an_hour_covers_exactly_what_the_dialog_says(
    console, browser
):
    from playwright.sync_api import expect

    url, executor = console["url"], console["executor"]
    proposed = {"limit": 250, "note": "start"}
    first = executor.request("budget", proposed, "Raise the limit to 250")
    page = browser(url, "rita", path=f"/console/approvals/{first}")

    page.click("#approve-same-kind")
    dialog = page.locator("#confirm-same-kind")
    expect(dialog).to_be_visible()
    covers = dialog.locator("#same-kind-covers")
    expect(covers).to_contain_text("shards whose id starts with 'budget'")
    expect(covers).to_contain_text("requests by agent executor through key")
    expect(covers).to_contain_text("limit is a number from 0 to 250")
    expect(covers).to_contain_text("anything else in the proposed value is not checked")
    assert axe_violations(page) == [], report(axe_violations(page))

    # Cancel creates nothing and decides nothing.
    page.click("#same-kind-cancel")
    expect(dialog).to_be_hidden()
    assert not ApprovalPolicy.objects.exists()
    assert Approval.objects.get(pk=first).status == "pending"

    page.click("#approve-same-kind")
    page.fill("#same-kind-reason", "Budget raises up to 250 are fine today")
    page.click("#same-kind-yes")
    expect(page.locator("#approval-status")).to_have_text("committed")

    policy = ApprovalPolicy.objects.get()
    assert (policy.shard_prefix, policy.requested_by, policy.created_by) == (
        "budget",
        "executor",
        "user:rita",
    )
    assert policy.when == [
        {"path": ["limit"], "op": ">=", "value": 0},
        {"path": ["limit"], "op": "<=", "value": 250},
    ]
    assert AuditEntry.objects.filter(action="approval.policy_created").count() == 1

    # The same kind is approved by the policy; a larger one waits for a person.
    same = executor.request("budget", {"limit": 250, "note": "again"}, "Again")
    assert Approval.objects.get(pk=same).decided_by == f"policy:{policy.id}"
    assert Shard.objects.get(pk="budget").value == {"limit": 250, "note": "again"}
    larger = executor.request("budget", {"limit": 251, "note": "again"}, "More")
    assert Approval.objects.get(pk=larger).status == "pending"
    # Nor does it reach across zero: a negative limit is not "at most 250" to a person.
    negative = executor.request("budget", {"limit": -5, "note": "again"}, "Negative")
    assert Approval.objects.get(pk=negative).status == "pending"
