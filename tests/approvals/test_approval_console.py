"""The risk officers' console: who may see it, who may decide, what it shows."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from access.identity import Actor
from approvals.diffview import line_diff
from approvals.models import Approval
from approvals.roles import groups_ensure
from approvals.services import approval_request
from shards.models import Shard
from shards.services import shard_create

pytestmark = pytest.mark.django_db


def person(username: str, group: str | None = None, **flags) -> User:
    user = User.objects.create_user(username, password="correct horse battery", **flags)
    groups_ensure()  # transactional tests elsewhere flush what the migration made
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


def signed_in(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


@pytest.fixture
def risk_officer() -> User:
    return person("rita", "Risk officers")


@pytest.fixture
def viewer() -> User:
    return person("victor", "Viewers")


@pytest.fixture
def payment() -> Approval:
    shard_create(
        actor=Actor("treasurer"),
        shard_id="treasury",
        shard_type="decision",
        initial_value={"balance": 1000, "note": "start"},
        reversible=False,
    )
    return approval_request(
        actor=Actor("executor"),
        shard_id="treasury",
        proposed_value={"balance": 750, "note": "start"},
        expected_version=1,
        description="Pay ACME invoice 42",
    )


def test_an_anonymous_visitor_is_sent_to_sign_in():
    response = Client().get("/console/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_a_signed_in_user_without_the_permission_is_refused(payment):
    outsider = signed_in(person("olga"))
    assert outsider.get("/console/").status_code == 403
    assert outsider.get(f"/console/approvals/{payment.id}").status_code == 403


def test_a_viewer_sees_the_queue_and_the_request_but_cannot_decide(viewer, payment):
    client = signed_in(viewer)
    queue = client.get("/console/").content.decode()
    assert "Pay ACME invoice 42" in queue
    detail = client.get(f"/console/approvals/{payment.id}").content.decode()
    assert "Approve and commit" not in detail
    assert "only risk officers can decide" in detail
    response = client.post(f"/console/approvals/{payment.id}/decide", {"action": "approve"})
    assert response.status_code == 403
    assert Approval.objects.get(pk=payment.id).status == "pending"


def test_the_queue_lists_pending_requests_newest_first_and_flags_drift(risk_officer, payment):
    newer = approval_request(
        actor=Actor("executor"),
        shard_id="treasury",
        proposed_value={"balance": 0, "note": "drain"},
        expected_version=1,
        description="Close the account",
    )
    html = signed_in(risk_officer).get("/console/queue/rows?sort=newest").content.decode()
    assert html.index(newer.id) < html.index(payment.id)
    assert "stale" not in html
    # The shard moves on (as another approved change would move it).
    Shard.objects.filter(pk="treasury").update(version=2)
    html = signed_in(risk_officer).get("/console/queue/rows").content.decode()
    assert html.count('class="badge warn"') == 2


def test_the_queue_filters_by_shard_prefix_as_key_scopes_do_with_case_counting(risk_officer):
    asked = {}
    for shard_id in ("treasury-us", "Treasury-eu"):
        shard_create(actor=Actor("treasurer"), shard_id=shard_id, shard_type="decision")
        asked[shard_id] = approval_request(
            actor=Actor("executor"),
            shard_id=shard_id,
            proposed_value=1,
            expected_version=1,
            description=f"Change {shard_id}",
        ).id
    html = signed_in(risk_officer).get("/console/queue/rows?shard=treasury").content.decode()
    assert asked["treasury-us"] in html
    assert asked["Treasury-eu"] not in html


def test_the_detail_page_shows_the_diff_and_the_three_values_after_drift(risk_officer, payment):
    Shard.objects.filter(pk="treasury").update(value={"balance": 900, "note": "fee"}, version=2)
    html = signed_in(risk_officer).get(f"/console/approvals/{payment.id}").content.decode()
    assert re.search(r'class="line del">.*balance&quot;: (<mark class="wd">)?900', html)
    assert re.search(r'class="line add">.*balance&quot;: (<mark class="wd">)?750', html)
    assert "The shard has moved on" in html
    assert "At request (v1)" in html and "Current (v2)" in html and "Proposed" in html


def test_deciding_needs_the_csrf_token(risk_officer, payment):
    client = signed_in(risk_officer, csrf=True)
    response = client.post(f"/console/approvals/{payment.id}/decide", {"action": "approve"})
    assert response.status_code == 403
    assert Approval.objects.get(pk=payment.id).status == "pending"


def test_a_risk_officer_approves_and_sees_the_commit_result(risk_officer, payment):
    client = signed_in(risk_officer, csrf=True)
    page = client.get(f"/console/approvals/{payment.id}")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())[1]
    response = client.post(
        f"/console/approvals/{payment.id}/decide",
        {"action": "approve", "reason": "invoice matches", "csrfmiddlewaretoken": token},
        follow=True,
    )
    html = response.content.decode()
    assert "Approved and committed: treasury is now at version 2" in html
    approval = Approval.objects.get(pk=payment.id)
    assert (approval.status, approval.decided_by) == ("committed", "user:rita")
    assert Shard.objects.get(pk="treasury").value == {"balance": 750, "note": "start"}
    assert "approval.committed" in html  # the audit trail on the page


def test_a_rejection_without_a_reason_is_refused_and_with_one_is_recorded(risk_officer, payment):
    client = signed_in(risk_officer)
    url = f"/console/approvals/{payment.id}/decide"
    html = client.post(url, {"action": "reject"}, follow=True).content.decode()
    assert "A rejection needs a reason" in html
    assert Approval.objects.get(pk=payment.id).status == "pending"
    client.post(url, {"action": "reject", "reason": "wrong vendor"})
    approval = Approval.objects.get(pk=payment.id)
    assert (approval.status, approval.reason) == ("rejected", "wrong vendor")
    assert Shard.objects.get(pk="treasury").version == 1


def test_history_filters_by_status_requester_decider_and_date(risk_officer, payment):
    other = approval_request(
        actor=Actor("planner"),
        shard_id="treasury",
        proposed_value={"balance": 1},
        expected_version=1,
        description="Another request",
    )
    signed_in(risk_officer).post(
        f"/console/approvals/{other.id}/decide", {"action": "reject", "reason": "no"}
    )
    client = signed_in(risk_officer)

    def listed(query: str) -> set[str]:
        html = client.get(f"/console/history?{query}").content.decode()
        return {a for a in (payment.id, other.id) if a in html}

    assert listed("") == {payment.id, other.id}
    assert listed("status=rejected") == {other.id}
    assert listed("status=pending") == {payment.id}
    assert listed("requested_by=executor") == {payment.id}
    assert listed("decided_by=user:rita") == {other.id}
    assert listed("since=2000-01-01&until=2000-01-02") == set()
    assert listed("shard_id=treasury&status=bogus") == {payment.id, other.id}


def test_a_large_value_folds_its_unchanged_lines():
    old = {f"key{n:03}": n for n in range(200)}
    new = dict(old, key100="changed")
    rows = line_diff(old, new)
    kinds = [row.kind for row in rows]
    assert kinds.count("fold") == 2
    assert kinds.count("add") == 1 and kinds.count("del") == 1
    assert len(rows) < 20
    folded = sum(len(row.lines) for row in rows if row.kind == "fold")
    assert folded + sum(1 for row in rows if row.kind in ("same", "del")) == 202  # braces too


def test_an_edit_nested_past_any_limit_is_shown_as_an_error_not_a_server_error(
    risk_officer, payment
):
    """The console's edit box takes an officer's JSON: nested 100,000 deep it once
    reached json.loads (which recurses per level) and answered 500."""
    rita = signed_in(risk_officer)
    for text in ("[" * 100_000 + "]" * 100_000, "[" * 150 + "]" * 150):
        answer = rita.post(f"/console/approvals/{payment.id}/edit", {"edited_value": text})
        assert answer.status_code == 400, answer.status_code  # the edit page, with the error
        assert "nested" in answer.content.decode() and 'id="edit-error"' in answer.content.decode()
    payment.refresh_from_db()
    assert payment.status == "pending" and payment.edited_value is None


def test_approving_the_same_kind_past_the_policy_cap_still_approves_and_says_no_policy(
    risk_officer, payment, settings
):
    settings.ZEROLOCK_MAX_POLICIES_PER_AUTHOR = 0
    rita = signed_in(risk_officer)
    answer = rita.post(f"/console/approvals/{payment.id}/approve-same-kind", {"reason": "ok"})
    assert answer.status_code == 302
    payment.refresh_from_db()
    assert payment.status == "committed"
    page = rita.get(f"/console/approvals/{payment.id}").content.decode()
    assert "but no standing policy was created: TOO_MANY_POLICIES" in page


def test_an_officer_whose_page_predates_another_officers_edit_cannot_approve_the_edit_unseen(
    risk_officer, payment
):
    from approvals.services import Decider, approval_decide

    Approval.objects.filter(pk=payment.pk).update(approvals_required=2)
    rita = signed_in(risk_officer)
    page = rita.get(f"/console/approvals/{payment.id}").content.decode()
    seen = re.search(r'name="expected_value_hash" value="([0-9a-f]{64})"', page).group(1)
    # Meanwhile another officer approves with an edit: 600 instead of 750.
    edna = person("edna", "Risk officers")
    approval_decide(
        approval_id=payment.id,
        decider=Decider.user(edna),
        approve=True,
        edited_value={"balance": 600, "note": "start"},
    )
    response = rita.post(
        f"/console/approvals/{payment.id}/decide",
        {"action": "approve", "expected_value_hash": seen},
        follow=True,
    )
    assert "APPROVAL_VALUE_CHANGED" in response.content.decode()
    payment.refresh_from_db()
    assert payment.status == "pending"
    assert [d.principal for d in payment.decisions.all()] == [f"user:{edna.pk}"]
    # Reloaded, the page carries the edited value's hash, and the approval applies it.
    page = rita.get(f"/console/approvals/{payment.id}").content.decode()
    now = re.search(r'name="expected_value_hash" value="([0-9a-f]{64})"', page).group(1)
    rita.post(
        f"/console/approvals/{payment.id}/decide", {"action": "approve", "expected_value_hash": now}
    )
    assert Shard.objects.get(pk="treasury").value == {"balance": 600, "note": "start"}
