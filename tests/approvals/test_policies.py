"""Standing approval policies (issue 28): a request that matches a live policy is
decided by it at once, under the same rules as a person's decision."""

from __future__ import annotations

from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.utils import timezone

from access.models import ApiKey
from approvals.models import Approval, ApprovalPolicy
from audit.models import AuditEntry
from shards.models import Shard

pytestmark = pytest.mark.django_db

SMALL = {"path": ["amount"], "op": "<", "value": 100}


@pytest.fixture
def executor_key(make_key) -> str:
    return make_key("shard:read", "shard:write", "shard:create", "approval:request", name="exec")


@pytest.fixture
def executor(executor_key, client_for):
    return client_for(executor_key, agent="executor")


@pytest.fixture
def officer(make_key, client_for):
    return client_for(make_key("shard:read", "approval:policy", name="officer"), agent="officer")


def a_shard(client, shard_id: str, value: Any, *, quorum: int = 1) -> None:
    response = client.post(
        "/api/shards",
        {
            "id": shard_id,
            "type": "decision",
            "initial_value": value,
            "reversible": False,
            "approvals_required": quorum,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()


def ask(client, shard_id: str, value: Any) -> dict[str, Any]:
    response = client.post(
        "/api/approvals/request",
        {
            "shard_id": shard_id,
            "proposed_value": value,
            "expected_version": 1,
            "description": "pay",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    return response.json()


def a_policy(client, **fields: Any) -> dict[str, Any]:
    body = {"shard_prefix": "pay:", "effect": "approve", "ttl_seconds": 3600, "reason": "small"}
    response = client.post("/api/approval-policies", {**body, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_matching_request_is_approved_by_the_policy_at_once_and_applied(executor, officer):
    a_shard(executor, "pay:1", {"amount": 0})
    policy = a_policy(officer, when=[SMALL], reason="payments under 100 are routine")
    assert policy["id"].startswith("pol_") and policy["live"] is True

    decided = ask(executor, "pay:1", {"amount": 50})

    assert decided["status"] == "committed"
    assert decided["decided_by"] == f"policy:{policy['id']}"
    assert decided["reason"] == "payments under 100 are routine"
    assert Shard.objects.get(pk="pay:1").value == {"amount": 50}
    entry = AuditEntry.objects.get(action="approval.approved")
    assert entry.details["principal"] == f"policy:{policy['id']}"
    assert entry.details["policy"]["policy_id"] == policy["id"]
    assert entry.details["policy"]["when"] == [SMALL]


def test_a_request_outside_the_when_range_stays_pending(executor, officer):
    a_shard(executor, "pay:1", {"amount": 0})
    a_policy(officer, when=[SMALL])
    assert ask(executor, "pay:1", {"amount": 100})["status"] == "pending"
    assert ask(executor, "pay:1", {"note": "no amount at all"})["status"] == "pending"
    assert Shard.objects.get(pk="pay:1").version == 1


def test_a_reject_policy_rejects_with_its_reason(executor, officer):
    a_shard(executor, "pay:1", {"amount": 0})
    a_policy(officer, effect="reject", when=[{"path": ["amount"], "op": ">", "value": 1000}])
    rejected = ask(executor, "pay:1", {"amount": 5000})
    assert (rejected["status"], rejected["reason"]) == ("rejected", "small")
    assert Shard.objects.get(pk="pay:1").version == 1


def test_reject_wins_over_approve_when_both_match(executor, officer):
    a_shard(executor, "pay:1", {"amount": 0, "to": "x"})
    a_policy(officer, when=[SMALL], reason="small ones are fine")
    blocked = a_policy(
        officer,
        effect="reject",
        when=[{"path": ["to"], "op": "==", "value": "mallory"}],
        reason="never to mallory",
    )
    decided = ask(executor, "pay:1", {"amount": 5, "to": "mallory"})
    assert decided["status"] == "rejected"
    assert decided["decided_by"] == f"policy:{blocked['id']}"
    assert ask(executor, "pay:1", {"amount": 5, "to": "bob"})["status"] == "committed"


def test_when_compares_nested_paths_and_every_compare_must_hold(executor, officer):
    a_shard(executor, "pay:1", {"payment": {"amount": 0, "currency": "EUR"}})
    a_policy(
        officer,
        when=[
            {"path": ["payment", "amount"], "op": "<", "value": 100},
            {"path": ["payment", "currency"], "op": "==", "value": "EUR"},
        ],
    )
    dollars = ask(executor, "pay:1", {"payment": {"amount": 5, "currency": "USD"}})
    assert dollars["status"] == "pending"
    euros = ask(executor, "pay:1", {"payment": {"amount": 5, "currency": "EUR"}})
    assert euros["status"] == "committed"


def test_a_policy_decides_nothing_once_it_has_expired(executor, officer):
    a_shard(executor, "pay:1", {"amount": 0})
    a_policy(officer, when=[SMALL], ttl_seconds=600)
    with time_machine.travel(timezone.now() + timezone.timedelta(seconds=601)):
        assert ask(executor, "pay:1", {"amount": 5})["status"] == "pending"
        listed = officer.get("/api/approval-policies?live=false").json()["results"]
        assert [p["live"] for p in listed] == [False]


def test_requester_and_key_filters_limit_what_a_policy_decides(executor, officer, make_key):
    a_shard(executor, "pay:1", {"amount": 0})
    executor_prefix = ApiKey.objects.get(name="exec").prefix
    a_policy(officer, requested_by="someone-else")
    assert ask(executor, "pay:1", {"amount": 1})["status"] == "pending"
    a_policy(officer, requested_by="executor", key_prefix=executor_prefix)
    assert ask(executor, "pay:1", {"amount": 1})["status"] == "committed"


def test_a_policy_never_decides_a_request_made_through_its_authors_own_key(make_key, client_for):
    both = make_key(
        "shard:read", "shard:create", "approval:request", "approval:policy", name="both"
    )
    agent = client_for(both, agent="greedy")
    a_shard(agent, "pay:1", {"amount": 0})
    a_policy(agent, when=[SMALL])
    assert ask(agent, "pay:1", {"amount": 5})["status"] == "pending"


def test_a_policy_never_decides_for_another_key_of_its_authors_user(make_key, client_for):
    alice = User.objects.create_user("alice")
    author = client_for(make_key("approval:policy", name="alice-ops", user=alice), agent="ops")
    asker = client_for(
        make_key("shard:read", "shard:create", "approval:request", name="alice-bot", user=alice),
        agent="bot",
    )
    a_shard(asker, "pay:1", {"amount": 0})
    a_policy(author, when=[SMALL])
    assert ask(asker, "pay:1", {"amount": 5})["status"] == "pending"


def test_with_quorum_two_a_policy_is_one_vote_and_a_person_is_still_needed(
    executor, officer, make_key, client_for
):
    a_shard(executor, "pay:1", {"amount": 0}, quorum=2)
    first = a_policy(officer, when=[SMALL])
    a_policy(officer, reason="a second policy is not a second vote")
    waiting = ask(executor, "pay:1", {"amount": 5})
    assert waiting["status"] == "pending"
    approval = Approval.objects.get(pk=waiting["id"])
    assert [d.principal for d in approval.decisions.all()] == [f"policy:{first['id']}"]

    person = client_for(make_key("shard:read", "approval:decide", name="person"), agent="p")
    done = person.post(f"/api/approvals/{waiting['id']}/approve", {}, format="json").json()
    assert done["status"] == "committed"
    assert Shard.objects.get(pk="pay:1").value == {"amount": 5}


def test_an_approved_policy_request_against_an_old_version_ends_approved_stale(executor, officer):
    a_shard(executor, "pay:1", {"amount": 0})
    a_policy(officer, when=[SMALL])
    assert ask(executor, "pay:1", {"amount": 1})["status"] == "committed"
    again = ask(executor, "pay:1", {"amount": 2})  # still names version 1
    assert again["status"] == "approved_stale"
    assert Shard.objects.get(pk="pay:1").value == {"amount": 1}


def test_creating_a_policy_needs_approval_policy_and_approval_star_is_not_enough(
    make_key, client_for
):
    star = client_for(make_key("approval:*", name="star"), agent="s")
    refused = star.post(
        "/api/approval-policies",
        {"shard_prefix": "pay:", "effect": "approve", "ttl_seconds": 600, "reason": "r"},
        format="json",
    )
    assert refused.status_code == 403
    admin = client_for(make_key("admin", name="root"), agent="root")
    assert a_policy(admin)["id"].startswith("pol_")


def test_a_scoped_key_creates_policies_only_within_its_scopes(make_key, client_for, officer):
    scoped = client_for(
        make_key("approval:policy", name="scoped", shard_prefixes=["pay:eu:"]), agent="s"
    )
    wide = scoped.post(
        "/api/approval-policies",
        {"shard_prefix": "pay:", "effect": "approve", "ttl_seconds": 600, "reason": "r"},
        format="json",
    )
    assert wide.status_code == 403
    everything = scoped.post(
        "/api/approval-policies",
        {"shard_prefix": "", "effect": "approve", "ttl_seconds": 600, "reason": "r"},
        format="json",
    )
    assert everything.status_code == 403
    mine = a_policy(scoped, shard_prefix="pay:eu:fr:")
    theirs = a_policy(officer, shard_prefix="pay:us:")
    seen = [p["id"] for p in scoped.get("/api/approval-policies").json()["results"]]
    assert seen == [mine["id"]]
    assert scoped.get(f"/api/approval-policies/{theirs['id']}").status_code == 404
    assert scoped.delete(f"/api/approval-policies/{theirs['id']}").status_code == 404


@pytest.mark.parametrize(
    "fields",
    [
        {"ttl_seconds": None},  # neither ttl_seconds nor expires_at
        {"expires_at": "2999-01-01T00:00:00Z"},  # both, and beyond the bound
        {"ttl_seconds": 31 * 24 * 3600},
        {"when": [{"path": ["a"], "op": "~", "value": 1}]},
        {"when": [{"path": ["a"], "op": "<"}]},
        {"when": [{"shard_id": "x", "version": 1}]},
        {"effect": "maybe"},
        {"reason": "  "},
    ],
)
def test_a_malformed_policy_is_refused_with_400(officer, fields):
    body = {"shard_prefix": "pay:", "effect": "approve", "ttl_seconds": 600, "reason": "r"}
    body.update(fields)
    body = {k: v for k, v in body.items() if v is not None}
    response = officer.post("/api/approval-policies", body, format="json")
    assert response.status_code == 400, response.json()
    assert not ApprovalPolicy.objects.exists()


def test_creation_and_deletion_are_audited_and_a_deleted_policy_decides_nothing(executor, officer):
    a_shard(executor, "pay:1", {"amount": 0})
    policy = a_policy(officer, when=[SMALL])
    assert officer.get(f"/api/approval-policies/{policy['id']}").json()["when"] == [SMALL]
    assert officer.delete(f"/api/approval-policies/{policy['id']}").status_code == 204
    assert officer.get(f"/api/approval-policies/{policy['id']}").status_code == 404
    created = AuditEntry.objects.get(action="approval.policy_created")
    deleted = AuditEntry.objects.get(action="approval.policy_deleted")
    assert created.details["policy"]["id"] == deleted.details["policy"]["id"] == policy["id"]
    assert deleted.agent_id == "agent:officer"
    assert ask(executor, "pay:1", {"amount": 5})["status"] == "pending"


def test_same_kind_reads_nested_list_and_removed_paths_from_the_stored_diff(executor):
    from approvals.policies import same_kind

    a_shard(executor, "pay:1", {"order": {"lines": [{"qty": 1}], "memo": "a", "tag": "x"}})
    asked = ask(executor, "pay:1", {"order": {"lines": [{"qty": 3}], "memo": "b"}})
    kind = same_kind(Approval.objects.get(pk=asked["id"]))
    assert kind is not None
    assert sorted(kind.fields["when"], key=str) == sorted(
        [
            {"path": ["order", "lines", 0, "qty"], "op": ">=", "value": 0},
            {"path": ["order", "lines", 0, "qty"], "op": "<=", "value": 3},
            {"path": ["order", "memo"], "op": "==", "value": "b"},
            {"path": ["order", "tag"], "op": "not_exists"},
        ],
        key=str,
    )
    assert kind.fields["shard_prefix"] == "pay:1"
    assert kind.fields["requested_by"] == "executor"


def test_the_admin_lists_policies_and_deleting_one_there_is_audited(officer):
    from django.test import Client

    policy = a_policy(officer, when=[SMALL])
    root = User.objects.create_superuser("root", password="pw-for-root-1")
    browser = Client()
    browser.force_login(root)
    listing = browser.get("/admin/approvals/approvalpolicy/")
    assert listing.status_code == 200 and policy["id"] in listing.content.decode()
    assert browser.get("/admin/approvals/approvalpolicy/add/").status_code == 403
    gone = browser.post(f"/admin/approvals/approvalpolicy/{policy['id']}/delete/", {"post": "yes"})
    assert gone.status_code == 302
    assert not ApprovalPolicy.objects.exists()
    deleted = AuditEntry.objects.get(action="approval.policy_deleted")
    assert (deleted.agent_id, deleted.details["policy"]["id"]) == ("user:root", policy["id"])


def test_a_policy_never_decides_for_its_authors_agent_id_through_another_key(make_key, client_for):
    author = client_for(make_key("approval:policy", name="ops-policy"), agent="ops")
    asker = client_for(
        make_key("shard:read", "shard:create", "approval:request", name="ops-work"), agent="ops"
    )
    a_shard(asker, "pay:1", {"amount": 0})
    a_policy(author, when=[SMALL])
    assert ask(asker, "pay:1", {"amount": 5})["status"] == "pending"


def test_an_author_holds_at_most_its_cap_of_live_policies_and_another_author_is_unaffected(
    officer, make_key, client_for, settings
):
    """Every request is matched against every live policy, inside the write lock:
    their number is each request's cost, so one author's is capped."""
    settings.ZEROLOCK_MAX_POLICIES_PER_AUTHOR = 2
    first = a_policy(officer)
    a_policy(officer, shard_prefix="ops:")
    body = {"shard_prefix": "x:", "effect": "approve", "ttl_seconds": 3600, "reason": "third"}
    refused = officer.post("/api/approval-policies", body, format="json")
    assert refused.status_code == 409, refused.json()
    assert refused.json()["error"]["code"] == "TOO_MANY_POLICIES"
    assert refused.json()["error"]["limit"] == 2
    assert len(officer.get("/api/approval-policies").json()["results"]) == 2
    other = client_for(make_key("approval:policy", name="other officer"), agent="other")
    assert other.post("/api/approval-policies", body, format="json").status_code == 201
    assert officer.delete(f"/api/approval-policies/{first['id']}").status_code == 204
    assert officer.post("/api/approval-policies", body, format="json").status_code == 201
