"""Issue 28, console defect 5: at phone width (390x844) the stacked change cards
lost their Was/Becomes labels and Approve was not sticky. On every kind of
request (a number, a nested append, a text edit, a quorum of two) the change is
above the fold and not under the sticky decision, the cards say which value is
which, and Approve stays on screen wherever the officer scrolls."""

from __future__ import annotations

import pytest

from access.identity import Actor
from shards.services import shard_create

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def box(page, selector: str) -> dict:
    return page.locator(selector).first.bounding_box()


def test_at_phone_width_the_change_is_labelled_above_the_fold_and_approve_stays(console, browser):
    from playwright.sync_api import expect

    executor = console["executor"]
    shard_create(
        actor=Actor("treasurer"),
        shard_id="policy.text",
        shard_type="decision",
        initial_value={"text": "Keep data 30 days.\nRefunds above 1000 need two.", "owner": "x"},
        reversible=False,
    )
    kinds = {
        "number": executor.request("budget", {"limit": 5, "note": "start"}, "A" * 3000),
        "nested": executor.request(
            "treasury",
            {
                "balance": 750,
                "payments": [{"to": "acme", "amount": 250, "memo": "invoice 42 " * 12}],
                "owner": "finance",
            },
            "Pay ACME",
            metadata={"tool": "payments.send", "arguments": {"to": "acme"}},
        ),
        "text": executor.request(
            "policy.text",
            {"text": "Keep data 90 days.\nRefunds above 10000 need two.", "owner": "x"},
            "Longer retention",
        ),
        "quorum": executor.request("board", {"seats": 5}, "Two more seats"),
    }
    page = browser(console["url"], "rita", **PHONE)
    for kind, approval_id in kinds.items():
        page.goto(f"{console['url']}/console/approvals/{approval_id}")
        first = box(page, "#summary tbody tr")
        decide = box(page, "#decide")
        # Above the fold, and not hidden under the sticky decision.
        assert first["y"] + first["height"] <= min(decide["y"], PHONE["height"]), (kind, first)
        approve = box(page, "#approve")
        assert approve["y"] >= 0 and approve["y"] + approve["height"] <= PHONE["height"], kind
        # Scrolled to the line diff and beyond, Approve is still in reach.
        page.locator("#line-diff").scroll_into_view_if_needed()
        page.mouse.wheel(0, 400)
        approve = box(page, "#approve")
        assert approve["y"] >= 0 and approve["y"] + approve["height"] <= PHONE["height"], kind
        expect(page.locator("#approve")).to_be_visible()

    page.goto(f"{console['url']}/console/approvals/{kinds['number']}")
    labels = page.eval_on_selector_all(
        "#summary tbody tr td[data-label]",
        "tds => tds.map(td => getComputedStyle(td, '::before').content)",
    )
    assert labels == ['"Was: "', '"Becomes: "'], labels
    was, becomes = box(page, "#summary td.was"), box(page, "#summary td.becomes")
    assert was["width"] > 0 and becomes["y"] > was["y"]  # stacked, each with its label
