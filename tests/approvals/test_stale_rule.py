"""Stale is one rule (``approvals.selectors.approval_stale``): the API's list and
answers, the console's queue, detail page and approve check, and the dashboard's
shard page all ask it, and so always agree."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from access.identity import Actor
from approvals import selectors
from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_request
from shards.selectors import shard_get
from shards.services import shard_commit, shard_create, shard_delete
from tests.approvals.test_approval_console import person, signed_in

pytestmark = pytest.mark.django_db

Surface = Callable[[Approval], bool]


@pytest.fixture
def budget() -> str:
    shard_create(
        actor=Actor("planner"), shard_id="budget", shard_type="decision", initial_value={"n": 1}
    )
    return "budget"


def asked(description: str, shard_id: str = "budget") -> Approval:
    return approval_request(
        actor=Actor("executor"),
        shard_id=shard_id,
        proposed_value={"n": 2},
        expected_version=1,
        description=description,
    )


def moved(shard_id: str = "budget") -> None:
    """Another writer commits: the shard leaves the version the requests expect."""
    shard = shard_get(shard_id, payload=False)
    shard_commit(actor=Actor("planner"), shard=shard, expected_version=1, new_value={"n": 9})


@pytest.fixture
def surfaces(make_key, client_for) -> dict[str, Surface]:
    """How each page, list and answer says whether an approval is stale."""
    reader: APIClient = client_for(make_key("shard:read"), agent="reader")
    officer = signed_in(person("rita", "Risk officers"))

    def api_list(approval: Approval) -> bool:
        listed = reader.get("/api/approvals").json()["results"]
        return next(a for a in listed if a["id"] == approval.id)["stale"]

    def api_detail(approval: Approval) -> bool:
        return reader.get(f"/api/approvals/{approval.id}").json()["stale"]

    def queue(approval: Approval) -> bool:
        rows = officer.get("/console/queue/rows").content.decode()
        row = re.search(rf'<tr class="row( stale)?" data-approval-id="{approval.id}"', rows)
        assert row is not None, rows
        return row.group(1) is not None

    def queue_stale_only(approval: Approval) -> bool:
        return approval.id in officer.get("/console/queue/rows?stale=1").content.decode()

    def detail_page(approval: Approval) -> bool:
        return (
            'id="stale-callout"'
            in officer.get(f"/console/approvals/{approval.id}").content.decode()
        )

    def dashboard(approval: Approval) -> bool:
        page = officer.get(f"/dashboard/shards/{approval.shard_id}").content.decode()
        link = re.search(
            rf'href="/console/approvals/{approval.id}">[^<]*</a>( <span class="badge warn")?', page
        )
        assert link is not None, page
        return link.group(1) is not None

    return {
        "GET /api/approvals": api_list,
        "GET /api/approvals/{id}": api_detail,
        "the queue's badge": queue,
        "the queue's stale-only filter": queue_stale_only,
        "the detail page's warning": detail_page,
        "the dashboard's badge": dashboard,
    }


def approve_is_held_back(approval: Approval) -> bool:
    """The console's check before an approve: a stale request is not approved
    there (it could not apply); the page says so and nothing is decided."""
    officer = signed_in(person(f"officer-{approval.id[-6:]}", "Risk officers"))
    page = officer.post(
        f"/console/approvals/{approval.id}/decide", {"action": "approve"}, follow=True
    ).content.decode()
    held = "This request can no longer apply" in page
    assert (Approval.objects.get(pk=approval.id).status == ApprovalStatus.PENDING) == held
    return held


def said(surfaces: dict[str, Surface], approval: Approval) -> dict[str, bool]:
    return {name: surface(approval) for name, surface in surfaces.items()}


def test_a_request_is_stale_on_no_surface_until_its_shard_moves_and_then_on_every_one(
    budget, surfaces
):
    approval = asked("Raise the limit")
    assert said(surfaces, approval) == dict.fromkeys(surfaces, False)
    moved()
    assert said(surfaces, approval) == dict.fromkeys(surfaces, True)
    assert approve_is_held_back(approval)


def test_every_surface_asks_the_one_staleness_rule(budget, surfaces, monkeypatch):
    flagged, plain = asked("flagged"), asked("plain")
    # Neither shard moved: only the rule itself can tell these two apart.
    monkeypatch.setattr(
        selectors, "approval_stale", lambda approval, shard: approval.description == "flagged"
    )
    assert said(surfaces, flagged) == dict.fromkeys(surfaces, True)
    assert said(surfaces, plain) == dict.fromkeys(surfaces, False)
    assert approve_is_held_back(flagged)
    assert not approve_is_held_back(plain)


def test_an_approval_whose_shard_is_gone_is_stale_in_the_api(budget, make_key, client_for):
    approval = asked("Raise the limit")
    shard_delete(actor=Actor("admin"), shard_id="budget")
    reader = client_for(make_key("shard:read"), agent="reader")
    detail = reader.get(f"/api/approvals/{approval.id}").json()
    listed = reader.get("/api/approvals").json()["results"][0]
    for shown in (detail, listed):
        assert (shown["status"], shown["current_version"], shown["stale"]) == (
            "expired",
            None,
            True,
        )


def test_stale_means_the_shard_is_not_at_the_expected_version_or_is_gone():
    approval, now = Approval(expected_version=3), timezone.now()
    assert not selectors.approval_stale(approval, selectors.ShardNow(3, now))
    assert selectors.approval_stale(approval, selectors.ShardNow(4, now))
    assert selectors.approval_stale(approval, selectors.ShardNow(2, now))
    assert selectors.approval_stale(approval, None)
