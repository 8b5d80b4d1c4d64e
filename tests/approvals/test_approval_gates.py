"""Approval gates through the API: irreversible writes wait for a human yes,
and every way around the gate is refused with the right code."""

from __future__ import annotations

import pytest
import time_machine
from django.utils import timezone

from approvals.models import Approval
from audit.models import AuditEntry
from shards.models import Shard

pytestmark = pytest.mark.django_db

TREASURY = {"balance": 1000, "payments": []}
PAYMENT = {"balance": 750, "payments": [{"to": "acme", "amount": 250}]}


@pytest.fixture
def executor(make_key, client_for):
    """The agent that wants to move money."""
    key = make_key("shard:read", "shard:write", "shard:create", "approval:request")
    return client_for(key, agent="executor")


@pytest.fixture
def other_agent(make_key, client_for):
    key = make_key("shard:read", "shard:write", "approval:request")
    return client_for(key, agent="other-agent")


@pytest.fixture
def risk_officer(make_key, client_for):
    return client_for(make_key("shard:read", "approval:decide"), agent="risk-officer")


@pytest.fixture
def second_officer(make_key, client_for):
    return client_for(make_key("shard:read", "approval:decide"), agent="second-officer")


@pytest.fixture
def treasury(executor):
    response = executor.post(
        "/api/shards",
        {"id": "treasury", "type": "decision", "initial_value": TREASURY, "reversible": False},
        format="json",
    )
    assert response.status_code == 201
    return "treasury"


def request_approval(client, shard_id="treasury", value=PAYMENT, version=1, **extra):
    body = {
        "shard_id": shard_id,
        "proposed_value": value,
        "expected_version": version,
        "description": "Pay ACME invoice 42",
        **extra,
    }
    return client.post("/api/approvals/request", body, format="json")


def commit(client, approval_id=None, value=PAYMENT, version=1, shard_id="treasury"):
    body = {"expected_version": version, "new_value": value}
    if approval_id:
        body["approval_id"] = approval_id
    return client.post(f"/api/shards/{shard_id}/commit", body, format="json")


def error_of(response):
    return response.json()["error"]


def test_a_request_is_stored_pending_with_a_diff_and_an_expiry(executor, treasury):
    response = request_approval(executor, ttl_seconds=600)
    assert response.status_code == 201
    approval = response.json()
    assert approval["status"] == "pending"
    assert approval["requested_by"] == "executor"
    assert approval["value_at_request"] == TREASURY
    assert approval["stale"] is False
    assert {"op": "replace", "path": "/balance", "value": 750} in approval["diff"]
    created = Approval.objects.get(pk=approval["id"])
    assert 599 <= (created.expires_at - created.created_at).total_seconds() <= 601
    assert executor.get(f"/api/approvals/{approval['id']}").json()["id"] == approval["id"]
    assert AuditEntry.objects.filter(action="approval.requested").count() == 1


def test_approving_applies_the_commit_through_occ_and_records_it(executor, risk_officer, treasury):
    approval_id = request_approval(executor).json()["id"]
    response = risk_officer.post(
        f"/api/approvals/{approval_id}/approve", {"reason": "invoice checked"}, format="json"
    )
    assert response.status_code == 200
    decided = response.json()
    assert decided["status"] == "committed"
    assert decided["commit"]["version"] == 2
    assert decided["decided_by"] == "agent:risk-officer"
    shard = executor.get("/api/shards/treasury").json()
    assert (shard["version"], shard["value"]) == (2, PAYMENT)
    entry = AuditEntry.objects.get(pk=decided["commit"]["audit_entry_id"])
    assert (entry.action, entry.agent_id, entry.version_after) == ("shard.commit", "executor", 2)
    actions = list(
        AuditEntry.objects.filter(details__approval_id=approval_id).values_list("action", flat=True)
    )
    assert actions == [
        "approval.requested",
        "approval.approved",
        "shard.commit",
        "approval.committed",
    ]


def test_a_shard_that_moved_on_leaves_the_approval_approved_stale_with_a_stale_error(
    executor, risk_officer, make_key, client_for
):
    executor.post(
        "/api/shards", {"id": "budget", "type": "decision", "initial_value": 1}, format="json"
    )
    approval_id = request_approval(executor, shard_id="budget", value=2).json()["id"]
    assert commit(executor, value=5, shard_id="budget").status_code == 200  # the shard moves on
    detail = risk_officer.get(f"/api/approvals/{approval_id}").json()
    assert detail["stale"] is True and detail["current_version"] == 2
    decided = risk_officer.post(f"/api/approvals/{approval_id}/approve").json()
    assert decided["status"] == "approved_stale"
    assert decided["commit"]["error"] == "STALE_VERSION"
    assert executor.get("/api/shards/budget").json()["value"] == 5  # nothing written


def test_rejecting_needs_a_reason_and_writes_nothing(executor, risk_officer, treasury):
    approval_id = request_approval(executor).json()["id"]
    no_reason = risk_officer.post(f"/api/approvals/{approval_id}/reject", {}, format="json")
    assert no_reason.status_code == 400
    assert error_of(no_reason)["code"] == "VALIDATION_ERROR"
    response = risk_officer.post(
        f"/api/approvals/{approval_id}/reject", {"reason": "no invoice on file"}, format="json"
    )
    assert response.json()["status"] == "rejected"
    assert response.json()["reason"] == "no invoice on file"
    assert Shard.objects.get(pk="treasury").version == 1


def test_listing_filters_by_status_shard_and_requester(
    executor, other_agent, risk_officer, treasury
):
    first = request_approval(executor).json()["id"]
    request_approval(other_agent, value={"balance": 0, "payments": []})
    risk_officer.post(f"/api/approvals/{first}/reject", {"reason": "no"}, format="json")
    pending = risk_officer.get("/api/approvals?status=pending").json()["results"]
    assert [a["requested_by"] for a in pending] == ["other-agent"]
    mine = risk_officer.get("/api/approvals?requested_by=executor").json()["results"]
    assert [a["id"] for a in mine] == [first]
    assert len(risk_officer.get("/api/approvals?shard_id=treasury").json()["results"]) == 2
    assert risk_officer.get("/api/approvals?shard_id=elsewhere").json()["results"] == []
    assert risk_officer.get("/api/approvals?status=nonsense").status_code == 400


def test_a_quorum_shard_needs_distinct_approvers_before_the_commit_applies(
    executor, risk_officer, second_officer
):
    executor.post(
        "/api/shards",
        {
            "id": "vault",
            "type": "decision",
            "initial_value": {"open": False},
            "reversible": False,
            "approvals_required": 2,
        },
        format="json",
    )
    approval_id = request_approval(executor, shard_id="vault", value={"open": True}).json()["id"]
    first = risk_officer.post(f"/api/approvals/{approval_id}/approve").json()
    assert first["status"] == "pending" and len(first["decisions"]) == 1
    again = risk_officer.post(f"/api/approvals/{approval_id}/approve")
    assert again.status_code == 409 and error_of(again)["code"] == "ALREADY_DECIDED"
    assert Shard.objects.get(pk="vault").version == 1
    second = second_officer.post(f"/api/approvals/{approval_id}/approve").json()
    assert second["status"] == "committed"
    assert Shard.objects.get(pk="vault").value == {"open": True}


# --- every way around the gate is refused ------------------------------------


def test_a_direct_commit_to_an_irreversible_shard_is_refused(executor, treasury):
    response = commit(executor)
    assert response.status_code == 403
    assert error_of(response)["code"] == "APPROVAL_REQUIRED"
    assert Shard.objects.get(pk="treasury").version == 1


def test_a_forged_approval_id_is_refused(executor, treasury):
    response = commit(executor, approval_id="apr_000000000000000000000000")
    assert (response.status_code, error_of(response)["reason"]) == (403, "NOT_FOUND")


@pytest.fixture
def approved(executor, risk_officer, treasury):
    """An approval in state approved whose auto-commit did not apply, so that a
    commit carrying it is the only way left to use it."""
    approval_id = request_approval(executor).json()["id"]
    Approval.objects.filter(pk=approval_id).update(status="approved")
    return approval_id


def test_an_approval_for_another_shard_is_refused(executor, approved):
    executor.post(
        "/api/shards",
        {"id": "payroll", "type": "decision", "initial_value": TREASURY, "reversible": False},
        format="json",
    )
    response = commit(executor, approval_id=approved, shard_id="payroll")
    assert (error_of(response)["code"], error_of(response)["reason"]) == (
        "APPROVAL_INVALID",
        "WRONG_SHARD",
    )


def test_another_agents_approval_is_refused(other_agent, approved):
    response = commit(other_agent, approval_id=approved)
    assert error_of(response)["reason"] == "WRONG_AGENT"


def test_an_approval_for_a_different_value_or_version_is_refused(executor, approved):
    tampered = commit(executor, approval_id=approved, value={"balance": 0, "payments": []})
    assert error_of(tampered)["reason"] == "VALUE_MISMATCH"
    other_version = commit(executor, approval_id=approved, version=2)
    assert error_of(other_version)["reason"] == "WRONG_VERSION"
    assert Shard.objects.get(pk="treasury").version == 1


def test_an_approved_approval_is_used_once_and_a_reused_one_is_refused(executor, approved):
    first = commit(executor, approval_id=approved)
    assert first.status_code == 200 and first.json()["version"] == 2
    assert Approval.objects.get(pk=approved).status == "committed"
    reused = commit(executor, approval_id=approved, version=2)
    assert reused.status_code == 403
    assert error_of(reused)["reason"] in ("ALREADY_USED", "WRONG_VERSION")
    same_again = commit(executor, approval_id=approved)
    assert error_of(same_again)["reason"] == "ALREADY_USED"
    assert Shard.objects.get(pk="treasury").version == 2


def test_a_rejected_or_pending_approval_cannot_carry_a_commit(executor, risk_officer, treasury):
    approval_id = request_approval(executor).json()["id"]
    pending = commit(executor, approval_id=approval_id)
    assert error_of(pending)["reason"] == "PENDING"
    risk_officer.post(f"/api/approvals/{approval_id}/reject", {"reason": "no"}, format="json")
    rejected = commit(executor, approval_id=approval_id)
    assert (rejected.status_code, error_of(rejected)["reason"]) == (403, "REJECTED")


def test_an_expired_approval_cannot_carry_a_commit_or_be_decided(executor, risk_officer, treasury):
    approval_id = request_approval(executor, ttl_seconds=60).json()["id"]
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=61)):
        expired_commit = commit(executor, approval_id=approval_id)
        assert error_of(expired_commit)["reason"] == "EXPIRED"
        decided = risk_officer.post(f"/api/approvals/{approval_id}/approve")
        assert decided.status_code == 409
        assert error_of(decided)["code"] == "APPROVAL_EXPIRED"
    # Deciding found it overdue and marked it, with no worker running.
    assert Approval.objects.get(pk=approval_id).status == "expired"
    assert AuditEntry.objects.filter(action="approval.expired").count() == 1
    assert Shard.objects.get(pk="treasury").version == 1


def test_the_requester_can_never_decide_its_own_request(executor, make_key, client_for, treasury):
    approval_id = request_approval(executor).json()["id"]
    # The same agent id, through a key that may decide.
    same_agent = client_for(make_key("shard:read", "approval:decide"), agent="executor")
    response = same_agent.post(f"/api/approvals/{approval_id}/approve")
    assert (response.status_code, error_of(response)["code"]) == (403, "SELF_APPROVAL")
    assert Shard.objects.get(pk="treasury").version == 1


def test_the_requesting_key_cannot_decide_under_another_agent_name(
    make_key, client_for, treasury, executor
):
    key = make_key("shard:read", "shard:write", "approval:request", "approval:decide")
    requester = client_for(key, agent="executor-2")
    approval_id = request_approval(requester).json()["id"]
    alias = client_for(key, agent="not-me")
    response = alias.post(f"/api/approvals/{approval_id}/approve")
    assert (response.status_code, error_of(response)["code"]) == (403, "SELF_APPROVAL")


def test_deciding_twice_is_refused_as_not_pending(executor, risk_officer, second_officer, treasury):
    approval_id = request_approval(executor).json()["id"]
    risk_officer.post(f"/api/approvals/{approval_id}/approve")
    late = second_officer.post(
        f"/api/approvals/{approval_id}/reject", {"reason": "x"}, format="json"
    )
    assert (late.status_code, error_of(late)["code"]) == (409, "APPROVAL_NOT_PENDING")


def test_a_key_without_decide_permission_cannot_decide(executor, other_agent, treasury):
    approval_id = request_approval(executor).json()["id"]
    response = other_agent.post(f"/api/approvals/{approval_id}/approve")
    assert (response.status_code, error_of(response)["code"]) == (403, "PERMISSION_DENIED")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"proposed_value": 1, "expected_version": 1, "description": "x"}, "shard_id"),
        ({"shard_id": "treasury", "expected_version": 1, "description": "x"}, "proposed_value"),
        ({"shard_id": "treasury", "proposed_value": 1, "description": "x"}, "expected_version"),
        ({"shard_id": "treasury", "proposed_value": 1, "expected_version": 1}, "description"),
        (
            {
                "shard_id": "treasury",
                "proposed_value": 1,
                "expected_version": 1,
                "description": "x",
                "ttl_seconds": 5,
            },
            "ttl_seconds",
        ),
        (
            {
                "shard_id": "treasury",
                "proposed_value": 1,
                "expected_version": 1,
                "description": "x",
                "ttl_seconds": 8 * 24 * 3600,
            },
            "ttl_seconds",
        ),
    ],
)
def test_a_malformed_request_gets_a_field_error_and_stores_nothing(executor, treasury, body, field):
    response = executor.post("/api/approvals/request", body, format="json")
    assert response.status_code == 400
    assert field in error_of(response)["fields"]
    assert Approval.objects.count() == 0


def test_unknown_shards_and_approvals_are_404s(executor, risk_officer):
    missing_shard = request_approval(executor, shard_id="nowhere")
    assert (missing_shard.status_code, error_of(missing_shard)["code"]) == (404, "SHARD_NOT_FOUND")
    missing = risk_officer.get("/api/approvals/apr_nothing")
    assert (missing.status_code, error_of(missing)["code"]) == (404, "APPROVAL_NOT_FOUND")
    assert risk_officer.post("/api/approvals/apr_nothing/approve").status_code == 404
