"""Decisions beyond yes or no (issue 28), against a live server over REST and
through the SDK: approve with edits, request changes, a request that follows
another (previous_id), and what an edit does to a quorum."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest
import websockets

from access.identity import Actor
from access.services import api_key_create
from approvals.models import Approval, WebhookDelivery, WebhookSubscription
from audit.models import AuditEntry
from shards.models import Shard
from shards.services import shard_create
from tests.conftest import ROOT
from zerolock_sdk.approvals import ApprovalClient
from zerolock_sdk.errors import SchemaViolationError

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

PAYMENT_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "maximum": 1000}, "to": {"type": "string"}},
    "required": ["amount", "to"],
}


def a_payment_shard(shard_id: str, *, approvals_required: int = 1) -> None:
    shard_create(
        actor=Actor("executor"),
        shard_id=shard_id,
        shard_type="decision",
        initial_value={"amount": 0, "to": ""},
        reversible=False,
        approvals_required=approvals_required,
        value_schema=PAYMENT_SCHEMA,
    )


def keys() -> tuple[str, list[str]]:
    """The agent's key and three officers' keys (three principals)."""
    _, agent = api_key_create(
        name="executor",
        permissions=["shard:read", "shard:write", "approval:request"],
        agent_ids=["executor"],
    )
    officers = [
        api_key_create(name=f"officer-{n}", permissions=["shard:read", "approval:decide"])[1]
        for n in range(3)
    ]
    return agent, officers


def call(
    url: str, key: str, agent: str, method: str, path: str, body: Any = None
) -> httpx.Response:
    headers = {"X-API-Key": key, "X-Agent-Id": agent}
    return httpx.request(method, url + path, headers=headers, json=body, timeout=30)


def ask(url: str, agent_key: str, shard_id: str, value: Any, **extra: Any) -> dict[str, Any]:
    response = call(
        url,
        agent_key,
        "executor",
        "POST",
        "/api/approvals/request",
        {
            "shard_id": shard_id,
            "proposed_value": value,
            "expected_version": 1,
            "description": "Pay the supplier",
            **extra,
        },
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_an_approval_with_edits_commits_the_edited_value_and_records_both(live_server_url):
    a_payment_shard("pay-edit")
    agent, (officer, *_) = keys()
    asked = ask(live_server_url, agent, "pay-edit", {"amount": 900, "to": "acme"})
    ws_url = live_server_url.replace("http://", "ws://") + "/ws/agents/"

    async def approve_while_listening() -> tuple[httpx.Response, dict[str, Any]]:
        headers = {"X-API-Key": agent, "X-Agent-Id": "executor"}
        async with websockets.connect(ws_url, additional_headers=headers) as socket:
            await asyncio.sleep(0.2)  # the socket joins its group
            response = await asyncio.to_thread(
                call,
                live_server_url,
                officer,
                "officer",
                "POST",
                f"/api/approvals/{asked['id']}/approve",
                {"edited_value": {"amount": 500, "to": "acme"}, "reason": "half now"},
            )
            while True:
                frame = json.loads(await asyncio.wait_for(socket.recv(), timeout=10))
                if frame.get("type") == "approval_decided":
                    return response, frame

    response, frame = asyncio.run(approve_while_listening())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "committed"
    assert body["proposed_value"] == {"amount": 900, "to": "acme"}
    assert body["edited_value"] == {"amount": 500, "to": "acme"}
    assert body["applied_value"] == {"amount": 500, "to": "acme"}
    assert (body["edited"], body["edited_by"]) == (True, "agent:officer")
    assert [d["kind"] for d in body["decisions"]] == ["edit"]
    assert Shard.objects.get(pk="pay-edit").value == {"amount": 500, "to": "acme"}
    assert frame["status"] == "committed" and frame["edited"] is True
    entry = AuditEntry.objects.get(shard_id="pay-edit", action="approval.approved")
    assert entry.value == {"amount": 500, "to": "acme"}
    assert entry.details["edited"] is True and entry.details["proposed_hash"]
    requested = AuditEntry.objects.get(shard_id="pay-edit", action="approval.requested")
    assert requested.value == {"amount": 900, "to": "acme"}
    commits = AuditEntry.objects.filter(shard_id="pay-edit", action="shard.commit")
    assert [c.value for c in commits] == [{"amount": 500, "to": "acme"}]


def test_an_edit_the_schema_refuses_leaves_the_request_pending_and_writes_nothing(
    live_server_url,
):
    a_payment_shard("pay-refused")
    agent, (officer, *_) = keys()
    asked = ask(live_server_url, agent, "pay-refused", {"amount": 900, "to": "acme"})
    entries_before = AuditEntry.objects.count()
    response = call(
        live_server_url,
        officer,
        "officer",
        "POST",
        f"/api/approvals/{asked['id']}/approve",
        {"edited_value": {"amount": 5000, "to": "acme"}},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "SCHEMA_VIOLATION"
    # Past the body parser's depth cap (64): refused before the service sees it.
    deep: Any = {"amount": 1, "to": "x"}
    for _ in range(120):
        deep = {"nested": deep}
    too_deep = call(
        live_server_url,
        officer,
        "officer",
        "POST",
        f"/api/approvals/{asked['id']}/approve",
        {"edited_value": deep},
    )
    assert too_deep.status_code == 400, too_deep.text
    assert too_deep.json()["error"]["code"] == "VALIDATION_ERROR"
    approval = Approval.objects.get(pk=asked["id"])
    assert (approval.status, approval.edited, approval.decisions.count()) == ("pending", False, 0)
    assert AuditEntry.objects.count() == entries_before
    assert Shard.objects.get(pk="pay-refused").version == 1
    # Still decidable: the same officer approves the proposal as it stands.
    again = call(
        live_server_url, officer, "officer", "POST", f"/api/approvals/{asked['id']}/approve", {}
    )
    assert again.json()["status"] == "committed"
    assert Shard.objects.get(pk="pay-refused").value == {"amount": 900, "to": "acme"}


def test_an_edit_resets_the_quorum_to_the_editors_vote_for_the_edited_value(live_server_url):
    a_payment_shard("pay-quorum", approvals_required=2)
    agent, (first, editor, third) = keys()
    asked = ask(live_server_url, agent, "pay-quorum", {"amount": 900, "to": "acme"})
    path = f"/api/approvals/{asked['id']}/approve"
    assert call(live_server_url, first, "o1", "POST", path, {}).json()["approvals_counted"] == 1
    edited = call(
        live_server_url, editor, "o2", "POST", path, {"edited_value": {"amount": 400, "to": "acme"}}
    ).json()
    # The first vote was for 900: it does not count toward 400.
    assert (edited["status"], edited["approvals_counted"]) == ("pending", 1)
    assert [(d["kind"], d["counts"]) for d in edited["decisions"]] == [
        ("approve", False),
        ("edit", True),
    ]
    assert Shard.objects.get(pk="pay-quorum").version == 1
    # The first officer may now approve the edited value; that reaches the quorum.
    done = call(live_server_url, first, "o1", "POST", path, {}).json()
    assert (done["status"], done["approvals_counted"]) == ("committed", 2)
    assert Shard.objects.get(pk="pay-quorum").value == {"amount": 400, "to": "acme"}
    # The third officer comes too late; and nobody's vote ever wrote 900.
    late = call(live_server_url, third, "o3", "POST", path, {})
    assert late.json()["error"]["code"] == "APPROVAL_NOT_PENDING"
    commits = AuditEntry.objects.filter(shard_id="pay-quorum", action="shard.commit")
    assert [c.value for c in commits] == [{"amount": 400, "to": "acme"}]
    reset = AuditEntry.objects.get(shard_id="pay-quorum", details__kind="edit")
    assert len(reset.details["votes_reset"]) == 1


def test_a_requester_cannot_edit_its_own_request(live_server_url):
    a_payment_shard("pay-self")
    _, key = api_key_create(
        name="both", permissions=["shard:read", "approval:request", "approval:decide"]
    )
    asked = ask(live_server_url, key, "pay-self", {"amount": 1, "to": "x"})
    response = call(
        live_server_url,
        key,
        "executor",
        "POST",
        f"/api/approvals/{asked['id']}/approve",
        {"edited_value": {"amount": 2, "to": "x"}},
    )
    assert response.json()["error"]["code"] == "SELF_APPROVAL"
    assert Approval.objects.get(pk=asked["id"]).edited is False


def test_request_changes_ends_the_request_and_a_new_one_follows_it(live_server_url):
    a_payment_shard("pay-changes")
    agent, (officer, *_) = keys()
    asked = ask(live_server_url, agent, "pay-changes", {"amount": 900, "to": "acme"})
    path = f"/api/approvals/{asked['id']}/request-changes"
    no_message = call(live_server_url, officer, "officer", "POST", path, {})
    assert no_message.status_code == 400
    blank = call(live_server_url, officer, "officer", "POST", path, {"message": "  "})
    assert blank.status_code == 400
    assert Approval.objects.get(pk=asked["id"]).status == "pending"
    response = call(
        live_server_url, officer, "officer", "POST", path, {"message": "Split it in two"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["reason"]) == ("changes_requested", "Split it in two")
    assert [d["kind"] for d in body["decisions"]] == ["request_changes"]
    assert Shard.objects.get(pk="pay-changes").version == 1
    entry = AuditEntry.objects.get(shard_id="pay-changes", action="approval.changes_requested")
    assert entry.details["reason"] == "Split it in two"
    # Deciding it again is refused: it has ended.
    late = call(
        live_server_url, officer, "officer", "POST", f"/api/approvals/{asked['id']}/approve", {}
    )
    assert late.json()["error"]["code"] == "APPROVAL_NOT_PENDING"

    follow = ask(
        live_server_url,
        agent,
        "pay-changes",
        {"amount": 450, "to": "acme"},
        previous_id=asked["id"],
    )
    assert follow["previous_id"] == asked["id"]
    shown = call(live_server_url, agent, "executor", "GET", f"/api/approvals/{follow['id']}")
    assert shown.json()["previous_id"] == asked["id"]


def test_previous_id_must_name_an_approval_of_the_same_shard_by_the_same_key(live_server_url):
    a_payment_shard("pay-prev-a")
    a_payment_shard("pay-prev-b")
    agent, _ = keys()
    _, other = api_key_create(
        name="other", permissions=["shard:read", "approval:request"], agent_ids=["executor"]
    )
    first = ask(live_server_url, agent, "pay-prev-a", {"amount": 1, "to": "x"})
    body = {"proposed_value": {"amount": 2, "to": "x"}, "expected_version": 1}
    body |= {"description": "again"}

    def follow(key: str, shard_id: str, previous_id: str) -> httpx.Response:
        return call(
            live_server_url,
            key,
            "executor",
            "POST",
            "/api/approvals/request",
            {**body, "shard_id": shard_id, "previous_id": previous_id},
        )

    missing = follow(agent, "pay-prev-a", "apr_" + "0" * 24)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "APPROVAL_NOT_FOUND")
    assert follow(agent, "pay-prev-b", first["id"]).status_code == 400
    assert follow(other, "pay-prev-a", first["id"]).status_code == 400
    assert follow(agent, "pay-prev-a", "not-an-id").status_code == 400
    assert Approval.objects.filter(shard_id__startswith="pay-prev").count() == 1


def test_the_sdk_edits_asks_for_changes_and_waits_for_what_was_applied(live_server_url):
    a_payment_shard("pay-sdk")
    agent, (officer, *_) = keys()

    async def scenario() -> None:
        async with (
            ApprovalClient(live_server_url, agent_id="executor", api_key=agent) as executor,
            ApprovalClient(live_server_url, agent_id="officer", api_key=officer) as officers,
        ):
            first = await executor.request_approval(
                "pay-sdk", {"amount": 900, "to": "acme"}, 1, "Pay"
            )
            waiting = asyncio.create_task(
                executor.wait_for_approval(first.id, poll_seconds=0.2, timeout_seconds=30)
            )
            await asyncio.sleep(0.3)
            await officers.request_changes(first.id, "Ask for 450")
            changed = await waiting
            assert (changed.status, changed.message) == ("changes_requested", "Ask for 450")
            assert changed.is_decided and changed.rejection_reason is None

            second = await executor.request_approval(
                "pay-sdk", {"amount": 450, "to": "acme"}, 1, "Pay less", previous_id=first.id
            )
            assert second.previous_id == first.id
            waiting = asyncio.create_task(
                executor.wait_for_approval(second.id, poll_seconds=0.2, timeout_seconds=30)
            )
            await asyncio.sleep(0.3)
            # The officer approves an edit of exactly the value it reviewed.
            assert len(second.applied_value_hash) == 64 and second.approver_group is None
            await officers.approve(
                second.id,
                edited_value={"amount": 400, "to": "acme"},
                expected_value_hash=second.applied_value_hash,
            )
            applied = await waiting
            assert (applied.status, applied.applied) == ("approved", True)
            assert applied.edited and applied.edited_value == {"amount": 400, "to": "acme"}
            assert applied.applied_value == {"amount": 400, "to": "acme"}
            assert applied.proposed_value == {"amount": 450, "to": "acme"}

    asyncio.run(scenario())
    assert Shard.objects.get(pk="pay-sdk").value == {"amount": 400, "to": "acme"}


def test_through_the_sdk_a_refused_edit_decides_nothing_and_an_edit_resets_the_quorum(
    live_server_url,
):
    a_payment_shard("pay-sdk-quorum", approvals_required=2)
    agent, (first, editor, _) = keys()

    async def scenario() -> None:
        async with (
            ApprovalClient(live_server_url, agent_id="executor", api_key=agent) as executor,
            ApprovalClient(live_server_url, agent_id="o1", api_key=first) as alice,
            ApprovalClient(live_server_url, agent_id="o2", api_key=editor) as bob,
        ):
            asked = await executor.request_approval(
                "pay-sdk-quorum", {"amount": 900, "to": "acme"}, 1, "Pay"
            )
            waiting = asyncio.create_task(
                executor.wait_for_approval(asked.id, poll_seconds=0.2, timeout_seconds=30)
            )
            voted = await alice.approve(asked.id)
            assert (voted.status, voted.raw["approvals_counted"]) == ("pending", 1)
            # Past the schema's maximum: refused, nothing recorded, still pending.
            with pytest.raises(SchemaViolationError):
                await bob.approve(asked.id, edited_value={"amount": 5000, "to": "acme"})
            still = await executor.client.get_approval(asked.id)
            assert (still.status, still.edited, still.raw["approvals_counted"]) == (
                "pending",
                False,
                1,
            )
            # Bob's edit is his vote for 400; Alice's vote was for 900 and stops counting.
            edited = await bob.approve(asked.id, edited_value={"amount": 400, "to": "acme"})
            assert (edited.status, edited.raw["approvals_counted"]) == ("pending", 1)
            assert edited.applied_value == {"amount": 400, "to": "acme"}
            assert not waiting.done()
            # Alice approves the value she now sees: the quorum of two is reached.
            done = await alice.approve(asked.id, expected_value_hash=edited.applied_value_hash)
            assert (done.status, done.applied, done.raw["approvals_counted"]) == (
                "approved",
                True,
                2,
            )
            applied = await waiting
            assert applied.applied_value == {"amount": 400, "to": "acme"} and applied.edited

    asyncio.run(scenario())
    assert Shard.objects.get(pk="pay-sdk-quorum").value == {"amount": 400, "to": "acme"}
    commits = AuditEntry.objects.filter(shard_id="pay-sdk-quorum", action="shard.commit")
    assert [c.value for c in commits] == [{"amount": 400, "to": "acme"}]


def test_webhooks_say_edited_and_carry_the_message_of_changes_requested(live_server_url):
    WebhookSubscription.objects.create(
        name="ops", url="http://127.0.0.1:9/hook", events=["approval.decided"]
    )
    a_payment_shard("pay-hooks")
    agent, (officer, *_) = keys()
    edited = ask(live_server_url, agent, "pay-hooks", {"amount": 900, "to": "acme"})
    call(
        live_server_url,
        officer,
        "officer",
        "POST",
        f"/api/approvals/{edited['id']}/approve",
        {"edited_value": {"amount": 10, "to": "acme"}},
    )
    changed = ask(live_server_url, agent, "pay-hooks", {"amount": 20, "to": "acme"})
    call(
        live_server_url,
        officer,
        "officer",
        "POST",
        f"/api/approvals/{changed['id']}/request-changes",
        {"message": "Name the invoice"},
    )
    payloads = {
        d.approval_id: d.payload["data"]
        for d in WebhookDelivery.objects.filter(event="approval.decided")
    }
    assert payloads[edited["id"]]["edited"] is True
    assert payloads[edited["id"]]["edited_by"] == "agent:officer"
    assert payloads[edited["id"]]["status"] == "committed"
    assert "message" not in payloads[edited["id"]]
    assert payloads[changed["id"]]["status"] == "changes_requested"
    assert payloads[changed["id"]]["message"] == "Name the invoice"
    assert payloads[changed["id"]]["edited"] is False


def test_the_edits_example_asks_again_after_changes_and_reads_the_edited_value(
    live_server_url,
):
    _, key = api_key_create(name="example", permissions=["admin"])
    _, approver = api_key_create(name="approver", permissions=["approval:decide", "shard:read"])
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples/patterns/approval-edits/main.py"), "--auto-decide"],
        env={
            **os.environ,
            "ZEROLOCK_URL": live_server_url,
            "ZEROLOCK_API_KEY": key,
            "ZEROLOCK_APPROVER_KEY": approver,
        },
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "changes requested: At most 500, please" in result.stdout
    assert "decided: approved, edited: True" in result.stdout
    assert "applied value: {'to': 'acme', 'amount': 450}" in result.stdout
    [first, second] = Approval.objects.filter(shard_id__startswith="example.payout.").order_by(
        "created_at"
    )
    assert (first.status, second.previous_id, second.status) == (
        "changes_requested",
        first.id,
        "committed",
    )


def test_racing_edits_and_approvals_commit_once_and_only_with_votes_for_the_applied_value(
    live_server_url,
):
    a_payment_shard("pay-race", approvals_required=2)
    agent, _ = keys()
    officers = [
        api_key_create(name=f"racer-{n}", permissions=["shard:read", "approval:decide"])[1]
        for n in range(8)
    ]
    asked = ask(live_server_url, agent, "pay-race", {"amount": 900, "to": "acme"})
    path = f"/api/approvals/{asked['id']}/approve"

    async def decide(n: int) -> int:
        # Even officers edit (each to its own amount), odd ones approve as it stands.
        body = {"edited_value": {"amount": 100 + n, "to": "acme"}} if n % 2 == 0 else {}
        async with httpx.AsyncClient(base_url=live_server_url, timeout=30) as client:
            response = await client.post(
                path, json=body, headers={"X-API-Key": officers[n], "X-Agent-Id": f"r{n}"}
            )
            return response.status_code

    async def race() -> list[int]:
        return await asyncio.gather(*(decide(n) for n in range(8)))

    statuses = asyncio.run(race())
    assert set(statuses) <= {200, 409}, statuses
    approval = Approval.objects.get(pk=asked["id"])
    assert approval.status == "committed"
    commits = AuditEntry.objects.filter(shard_id="pay-race", action="shard.commit")
    assert [c.value for c in commits] == [approval.value_to_apply]  # written once
    assert Shard.objects.get(pk="pay-race").value == approval.value_to_apply
    decisions = list(approval.decisions.order_by("created_at", "id"))
    counted = [d for d in decisions if d.counts]
    assert len(counted) == 2  # the quorum, no more
    edits = [d for d in decisions if d.kind == "edit"]
    if edits:  # every counted vote came at or after the edit that set the applied value
        last_edit = edits[-1]
        assert approval.edited_by == last_edit.decider
        assert all(d.id >= last_edit.id for d in counted)


def test_an_approval_of_a_value_another_officer_edited_since_it_was_seen_is_refused(
    live_server_url,
):
    """The edit race closed (docs/decisions.md): an officer approves with the
    hash of the value it reviewed; another officer's edit in between refuses it,
    and nothing is recorded, so nobody's vote counts for a value they never saw."""
    a_payment_shard("pay-seen", approvals_required=2)
    agent, (first, editor, _) = keys()
    asked = ask(live_server_url, agent, "pay-seen", {"amount": 900, "to": "acme"})
    path = f"/api/approvals/{asked['id']}/approve"
    seen = asked["applied_value_hash"]
    assert len(seen) == 64
    edited = call(
        live_server_url, editor, "o2", "POST", path, {"edited_value": {"amount": 400, "to": "acme"}}
    ).json()
    assert edited["applied_value_hash"] != seen

    late = call(live_server_url, first, "o1", "POST", path, {"expected_value_hash": seen})
    assert late.status_code == 409, late.text
    error = late.json()["error"]
    assert error["code"] == "APPROVAL_VALUE_CHANGED"
    assert error["applied_value"] == {"amount": 400, "to": "acme"}
    assert error["applied_value_hash"] == edited["applied_value_hash"]
    now = call(live_server_url, first, "o1", "GET", f"/api/approvals/{asked['id']}").json()
    assert (now["status"], len(now["decisions"])) == ("pending", 1)

    # Having seen the edited value, the officer approves it: the quorum is reached.
    done = call(
        live_server_url,
        first,
        "o1",
        "POST",
        path,
        {"expected_value_hash": error["applied_value_hash"]},
    ).json()
    assert (done["status"], done["applied_value"]) == ("committed", {"amount": 400, "to": "acme"})
    malformed = call(live_server_url, first, "o1", "POST", path, {"expected_value_hash": "abc"})
    assert malformed.status_code == 400
