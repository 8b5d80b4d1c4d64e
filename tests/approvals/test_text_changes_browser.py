"""Issue 28, console defect 7: a text change's queue preview showed the first
40 characters of both texts (the same, for two versions of one policy), and the
line diff showed the whole text as one JSON line full of "\\n". The preview now
shows where the texts differ, and the diff shows the text's own lines."""

from __future__ import annotations

import pytest

from access.identity import Actor
from shards.services import shard_create

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

BEFORE = (
    "Keep customer data for 30 days.\n"
    "Refunds above EUR 1,000 need two signatures.\n"
    "Exports go to the EU region only.\n"
)
AFTER = BEFORE.replace("EUR 1,000", "EUR 10,000")


def test_a_text_change_is_previewed_where_it_differs_and_diffed_line_by_line(console, browser):
    from playwright.sync_api import expect

    shard_create(
        actor=Actor("treasurer"),
        shard_id="policy.refunds",
        shard_type="decision",
        initial_value={"text": BEFORE},
        reversible=False,
    )
    approval_id = console["executor"].request(
        "policy.refunds", {"text": AFTER}, "Raise the two-signature threshold"
    )
    page = browser(console["url"], "rita")
    preview = page.locator(f"tr[data-approval-id='{approval_id}'] .preview")
    expect(preview.locator(".val.old")).to_contain_text("EUR 1,000")
    expect(preview.locator(".val.new")).to_contain_text("EUR 10,000")
    expect(preview.locator(".val.old")).not_to_contain_text("Keep customer")

    page.goto(f"{console['url']}/console/approvals/{approval_id}")
    diff = page.locator("#line-diff .diff")
    removed = diff.locator(".line.del")
    added = diff.locator(".line.add")
    expect(removed).to_have_count(1)
    expect(added).to_have_count(1)
    expect(removed).to_contain_text("Refunds above EUR 1,000 need two signatures.")
    expect(added).to_contain_text("Refunds above EUR 10,000 need two signatures.")
    assert "\\n" not in removed.inner_text() + added.inner_text()
    expect(diff.locator(".hunk").first).to_have_text("in /text")
    # The unchanged lines of the text stay as context, each on its own line.
    expect(diff.locator(".line.same", has_text="Exports go to the EU region only.")).to_have_count(
        1
    )
