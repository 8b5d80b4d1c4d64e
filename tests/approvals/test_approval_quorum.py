"""Quorum counts principals (API keys, console users), never the agent names one
key claims: issue 16, finding 3. One ``approval:decide`` key without agent
binding approved as dec-a, dec-b and dec-c, and a quorum of 3 applied the commit."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import IntegrityError, connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone

from access.models import ApiKey
from approvals.models import Approval, ApprovalDecision
from approvals.roles import groups_ensure
from audit.models import AuditEntry
from shards.models import Shard

VAULT = {"open": False}
OPENED = {"open": True}


@pytest.fixture
def executor(make_key, client_for):
    key = make_key("shard:read", "shard:write", "shard:create", "approval:request")
    return client_for(key, agent="executor")


@pytest.fixture
def vault(executor) -> str:
    response = executor.post(
        "/api/shards",
        {
            "id": "vault",
            "type": "decision",
            "initial_value": VAULT,
            "reversible": False,
            "approvals_required": 3,
        },
        format="json",
    )
    assert response.status_code == 201
    return "vault"


@pytest.fixture
def request_id(executor, vault) -> str:
    response = executor.post(
        "/api/approvals/request",
        {
            "shard_id": vault,
            "proposed_value": OPENED,
            "expected_version": 1,
            "description": "Open the vault",
        },
        format="json",
    )
    assert response.status_code == 201
    return response.json()["id"]


@pytest.fixture
def decider_key(make_key):
    """Makes an approval:decide key with no agent binding; returns (raw key, prefix)."""

    def make(name: str) -> tuple[str, str]:
        raw = make_key("shard:read", "approval:decide", name=name)
        return raw, raw.removeprefix("zl_").split(".")[0]

    return make


def approve(client, approval_id: str):
    return client.post(f"/api/approvals/{approval_id}/approve", {}, format="json")


def person(username: str) -> User:
    user = User.objects.create_user(username, password="correct horse battery")
    groups_ensure()
    user.groups.add(Group.objects.get(name="Risk officers"))
    return user


def console_approve(user: User, approval_id: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.post(
        f"/console/approvals/{approval_id}/decide", {"action": "approve"}, follow=True
    )
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_one_unbound_key_approving_as_dec_a_dec_b_and_dec_c_counts_once_and_commits_nothing(
    request_id, decider_key, client_for
):
    key, prefix = decider_key("shared reviewer key")
    first = approve(client_for(key, agent="dec-a"), request_id)
    assert first.status_code == 200
    assert (first.json()["status"], first.json()["approvals_counted"]) == ("pending", 1)
    for alias in ("dec-b", "dec-c"):
        again = approve(client_for(key, agent=alias), request_id)
        assert again.status_code == 409
        error = again.json()["error"]
        assert error["code"] == "ALREADY_DECIDED"
        assert (error["principal"], error["decided_as"]) == (f"key:{prefix}", "agent:dec-a")
    assert Shard.objects.get(pk="vault").version == 1
    approval = Approval.objects.get(pk=request_id)
    assert (approval.status, approval.approvals_counted()) == ("pending", 1)
    assert list(approval.decisions.values_list("principal", "agent_id")) == [
        (f"key:{prefix}", "dec-a")
    ]
    assert AuditEntry.objects.filter(action="approval.approved").count() == 1


@pytest.mark.django_db
def test_a_key_bound_to_three_agent_ids_is_still_one_vote(request_id, make_key, client_for):
    key = make_key("shard:read", "approval:decide", agents=["dec-a", "dec-b", "dec-c"])
    assert approve(client_for(key, agent="dec-a"), request_id).status_code == 200
    assert approve(client_for(key, agent="dec-b"), request_id).status_code == 409
    assert Approval.objects.get(pk=request_id).approvals_counted() == 1


@pytest.mark.django_db
def test_three_distinct_keys_commit_a_quorum_of_three(request_id, decider_key, client_for):
    answers = [
        approve(client_for(decider_key(name)[0], agent=name), request_id).json()
        for name in ("ann", "bob", "cyd")
    ]
    assert [a["approvals_counted"] for a in answers] == [1, 2, 3]
    assert [a["status"] for a in answers] == ["pending", "pending", "committed"]
    assert Shard.objects.get(pk="vault").value == OPENED


@pytest.mark.django_db
def test_two_keys_claiming_the_same_agent_id_are_two_principals(
    request_id, decider_key, client_for
):
    for name in ("ann", "bob"):
        response = approve(client_for(decider_key(name)[0], agent="reviewer"), request_id)
        assert response.status_code == 200
    assert Approval.objects.get(pk=request_id).approvals_counted() == 2


@pytest.mark.django_db
def test_two_keys_and_a_risk_officer_in_the_console_commit_a_quorum_of_three(
    request_id, decider_key, client_for
):
    rita = person("rita")
    assert approve(client_for(decider_key("ann")[0], agent="ann"), request_id).status_code == 200
    html = console_approve(rita, request_id)
    assert "Your approval is recorded (2 of 3)" in html
    # Rita again: a person counts once too.
    html = console_approve(rita, request_id)
    assert "ALREADY_DECIDED" in html
    assert Approval.objects.get(pk=request_id).approvals_counted() == 2
    assert Shard.objects.get(pk="vault").version == 1
    last = approve(client_for(decider_key("bob")[0], agent="bob"), request_id).json()
    assert last["status"] == "committed"
    assert Shard.objects.get(pk="vault").value == OPENED
    assert [d["principal"] for d in last["decisions"]][1] == f"user:{rita.pk}"


@pytest.mark.django_db
def test_the_requesting_key_under_another_agent_name_cannot_approve_and_does_not_count(
    make_key, client_for, vault
):
    key = make_key("shard:read", "shard:write", "approval:request", "approval:decide")
    body = {
        "shard_id": vault,
        "proposed_value": OPENED,
        "expected_version": 1,
        "description": "Open it myself",
    }
    approval_id = client_for(key, agent="executor-2").post(
        "/api/approvals/request", body, format="json"
    )
    approval_id = approval_id.json()["id"]
    for alias in ("not-me", "dec-a", "dec-b"):
        response = approve(client_for(key, agent=alias), approval_id)
        assert (response.status_code, response.json()["error"]["code"]) == (403, "SELF_APPROVAL")
    approval = Approval.objects.get(pk=approval_id)
    assert (approval.approvals_counted(), approval.decisions.count()) == (0, 0)


@pytest.mark.django_db
def test_the_api_detail_shows_whose_approvals_count_and_the_progress(
    request_id, decider_key, client_for
):
    key, prefix = decider_key("night shift reviewer")
    reviewer = client_for(key, agent="dec-a")
    approve(reviewer, request_id)
    detail = reviewer.get(f"/api/approvals/{request_id}").json()
    assert (detail["approvals_counted"], detail["approvals_required"]) == (1, 3)
    [decision] = detail["decisions"]
    assert decision == {
        "decider": "agent:dec-a",
        "approve": True,
        "reason": "",
        "created_at": decision["created_at"],
        "principal": f"key:{prefix}",
        "principal_name": "night shift reviewer",
        "agent_id": "dec-a",
        "counts": True,
        "kind": "approve",
    }
    listed = reviewer.get("/api/approvals").json()["results"][0]
    assert listed["approvals_counted"] == 1
    assert listed["decisions"][0]["principal"] == f"key:{prefix}"


@pytest.mark.django_db
def test_the_console_detail_page_shows_the_principals_and_the_progress(
    request_id, decider_key, client_for
):
    key, prefix = decider_key("night shift reviewer")
    approve(client_for(key, agent="dec-a"), request_id)
    rita = person("rita")
    console_approve(rita, request_id)
    client = Client()
    client.force_login(rita)
    html = client.get(f"/console/approvals/{request_id}").content.decode()
    assert re.search(r'id="quorum">2 of 3 approvals', html)
    assert f"<code>key:{prefix}</code>" in html
    assert "night shift reviewer" in html and "<td>dec-a</td>" in html
    assert f"<code>user:{rita.pk}</code>" in html and "<td>rita</td>" in html


# --- the migration ------------------------------------------------------------

BEFORE = [("approvals", "0002_risk_officer_and_viewer_groups")]
AFTER = [("approvals", "0003_decision_principals_and_stored_diff")]


@pytest.mark.django_db(transaction=True)
def test_decisions_from_before_principals_migrate_and_one_keys_aliases_stop_counting(make_key):
    raw = make_key("approval:decide", name="old key")
    key = ApiKey.objects.get(prefix=raw.removeprefix("zl_").split(".")[0])
    rita = User.objects.create_user("rita")
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        apps = executor.loader.project_state(BEFORE).apps
        OldApproval = apps.get_model("approvals", "Approval")
        OldDecision = apps.get_model("approvals", "ApprovalDecision")
        now = timezone.now()
        old = OldApproval.objects.create(
            shard_id="vault",
            description="from before",
            requested_by="executor",
            requested_key_prefix="reqkey00",
            proposed_value={"open": True, "n": [1, 2]},
            proposed_hash="x",
            expected_version=1,
            value_at_request={"open": False, "n": [1]},
            version_at_request=1,
            approvals_required=3,
            created_at=now,
            expires_at=now + timezone.timedelta(hours=1),
        )
        rows = [
            ("agent:dec-a", key.prefix),
            ("agent:dec-b", key.prefix),  # the same key again: the finding
            ("user:rita", ""),
            ("user:gone", ""),  # a person deleted since
        ]
        for n, (decider, prefix) in enumerate(rows):
            OldDecision.objects.create(
                approval=old,
                decider=decider,
                key_prefix=prefix,
                approve=True,
                created_at=now + timezone.timedelta(seconds=n),
            )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    migrated = Approval.objects.get(pk=old.pk)
    decisions = list(
        migrated.decisions.values_list("principal", "agent_id", "api_key", "user", "counts")
    )
    assert decisions == [
        (f"key:{key.prefix}", "dec-a", key.pk, None, True),
        (f"key:{key.prefix}", "dec-b", key.pk, None, False),
        (f"user:{rita.pk}", "", None, rita.pk, True),
        ("username:gone", "", None, None, True),
    ]
    assert migrated.approvals_counted() == 3
    assert sorted(migrated.diff, key=lambda op: op["path"]) == [
        {"op": "add", "path": "/n/1", "value": 2},
        {"op": "replace", "path": "/open", "value": True},
    ]
    assert migrated.diff_omitted == ""
    # The constraint the migration adds holds: a counted second vote is refused.
    with pytest.raises(IntegrityError):
        ApprovalDecision.objects.create(
            approval=migrated, decider="agent:dec-c", principal=f"key:{key.prefix}", approve=True
        )


# --- people, not keys (issue 25, L3): a key that belongs to a user counts as that
# user, and an installation may let only people decide.


def keys_of(make_key, user, n: int) -> list[str]:
    return [make_key("shard:read", "approval:decide", name=f"k{i}", user=user) for i in range(n)]


@pytest.mark.django_db
def test_one_persons_two_keys_and_login_count_once(request_id, make_key, client_for):
    dora = person("dora")
    first, second = keys_of(make_key, dora, 2)
    assert approve(client_for(first, agent="dora-bot"), request_id).json()["approvals_counted"] == 1
    again = approve(client_for(second, agent="dora-bot-2"), request_id)
    assert again.status_code == 409 and again.json()["error"]["code"] == "ALREADY_DECIDED"
    assert again.json()["error"]["principal"] == f"user:{dora.pk}"
    console_approve(dora, request_id)  # in the console: the same person again
    approval = Approval.objects.get(pk=request_id)
    assert approval.approvals_counted() == 1 and approval.status == "pending"
    assert Shard.objects.get(pk="vault").version == 1


@pytest.mark.django_db
def test_the_person_behind_the_requesting_key_cannot_approve_in_the_console(make_key, client_for):
    ruth = person("ruth")
    asker = client_for(
        make_key("shard:read", "shard:create", "approval:request", user=ruth), agent="ruth-bot"
    )
    assert asker.post("/api/shards", {"id": "till", "type": "decision", "initial_value": 0,
                      "reversible": False}, format="json").status_code == 201  # fmt: skip
    asked = asker.post("/api/approvals/request", {"shard_id": "till", "expected_version": 1,
                       "proposed_value": 1, "description": "mine"}, format="json").json()  # fmt: skip
    page = console_approve(ruth, asked["id"])
    assert "cannot decide its own request" in page
    assert Approval.objects.get(pk=asked["id"]).status == "pending"
    key_of_ruth = make_key("approval:decide", user=ruth)
    answer = approve(client_for(key_of_ruth, agent="ruth-reviewer"), asked["id"])
    assert answer.json()["error"]["code"] == "SELF_APPROVAL"


@pytest.mark.django_db
def test_where_only_people_count_a_key_of_no_one_may_not_decide(
    request_id, make_key, client_for, settings
):
    settings.ZEROLOCK_APPROVALS_DISTINCT_USERS = True
    nobodys = make_key("shard:read", "approval:decide", name="shared")
    refused = approve(client_for(nobodys, agent="bot"), request_id)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "PERMISSION_DENIED"
    answers = [approve(client_for(keys_of(make_key, person(n), 1)[0], agent=n), request_id)
               for n in ("ann", "bob", "cyd")]  # fmt: skip
    assert [a.json()["status"] for a in answers] == ["pending", "pending", "committed"]


@pytest.mark.django_db
def test_createapikey_ties_a_key_to_a_user(capsys):
    eve = person("eve")
    call_command("createapikey", "eve's reviewer", "--permissions", "approval:decide",
                 "--user", "eve")  # fmt: skip
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    prefix = raw.removeprefix("zl_").split(".")[0]
    assert ApiKey.objects.get(prefix=prefix).user == eve
    with pytest.raises(Exception, match="No user named"):
        call_command("createapikey", "ghost", "--user", "nobody")
