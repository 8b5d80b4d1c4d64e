"""Routing and escalation (issue 28): a request on a routed shard is seen and
decided only by its approver group (and, once escalated, its escalation
group); outside them it does not exist, in the console as over the API's
session-less door. Undecided in time, it escalates exactly once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.test import Client

from access.identity import Actor
from approvals import routing
from approvals.models import (
    Approval,
    ApprovalPolicy,
    ApprovalRoute,
    ApprovalStatus,
    WebhookDelivery,
    WebhookSubscription,
)
from approvals.policies import policy_create
from approvals.roles import groups_ensure
from approvals.services import Decider, approval_decide, approval_escalate_due, approval_request
from audit.models import AuditAction, AuditEntry
from shards.services import shard_create

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery"


def person(username: str, *groups: str, **flags) -> User:
    groups_ensure()  # transactional tests flush what the migration made
    user = User.objects.create_user(username, password=PASSWORD, **flags)
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    return user


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def shard(shard_id: str) -> None:
    shard_create(
        actor=Actor("treasurer"),
        shard_id=shard_id,
        shard_type="decision",
        initial_value={"amount": 0},
    )


def ask(shard_id: str, description: str, amount: int = 100) -> Approval:
    return approval_request(
        actor=Actor("executor"),
        shard_id=shard_id,
        proposed_value={"amount": amount},
        expected_version=1,
        description=description,
    )


def route(prefix: str, group: str, *, after: int | None = None, to: str = "") -> ApprovalRoute:
    return ApprovalRoute.objects.create(
        shard_prefix=prefix,
        approver_group=Group.objects.get_or_create(name=group)[0],
        escalate_after_seconds=after,
        escalation_group=Group.objects.get_or_create(name=to)[0] if to else None,
    )


@pytest.fixture
def people() -> dict[str, User]:
    """rita approves payments, olga is an officer outside that group, lena leads
    the treasury (where payments escalate), vera views payments, victor only
    views, root is an admin."""
    return {
        "rita": person("rita", "Risk officers", "Payments approvers"),
        "olga": person("olga", "Risk officers"),
        "lena": person("lena", "Risk officers", "Treasury leads"),
        "vera": person("vera", "Viewers", "Payments approvers"),
        "victor": person("victor", "Viewers"),
        "root": person("root", is_superuser=True, is_staff=True),
    }


@pytest.fixture
def payment(people) -> Approval:
    """A payment request, routed to "Payments approvers", escalating to
    "Treasury leads" after ten minutes."""
    route("pay.", "Payments approvers", after=600, to="Treasury leads")
    shard("pay.acme")
    return ask("pay.acme", "Pay ACME invoice 42")


def pending(approval: Approval) -> bool:
    approval.refresh_from_db()
    return approval.status == ApprovalStatus.PENDING and not approval.decisions.exists()


# --- who sees and decides, in the console ------------------------------------------


def test_an_officer_outside_the_group_does_not_see_the_request_in_the_queue(people, payment):
    olga, rita = signed_in(people["olga"]), signed_in(people["rita"])
    assert "Pay ACME invoice 42" not in olga.get("/console/").content.decode()
    assert "Pay ACME invoice 42" not in olga.get("/console/queue/rows").content.decode()
    assert olga.get("/console/queue/count").json() == {"pending": 0}
    assert "Pay ACME invoice 42" in rita.get("/console/").content.decode()
    assert rita.get("/console/queue/count").json() == {"pending": 1}


def test_an_officer_outside_the_group_gets_the_same_404_as_for_an_unknown_request(people, payment):
    olga = signed_in(people["olga"])
    page = olga.get(f"/console/approvals/{payment.id}")
    unknown = olga.get("/console/approvals/apr_000000000000000000000000")
    assert page.status_code == unknown.status_code == 404
    assert "Pay ACME" not in page.content.decode()
    assert signed_in(people["rita"]).get(f"/console/approvals/{payment.id}").status_code == 200


def test_an_officer_outside_the_group_cannot_decide_by_any_console_form(people, payment):
    olga = signed_in(people["olga"])
    base = f"/console/approvals/{payment.id}"
    assert olga.post(f"{base}/decide", {"action": "approve"}).status_code == 404
    assert olga.post(f"{base}/decide", {"action": "reject", "reason": "no"}).status_code == 404
    assert olga.post(f"{base}/approve-same-kind", {}).status_code == 404
    assert olga.post(f"{base}/edit", {"edited_value": '{"amount": 1}'}).status_code == 404
    olga.post("/console/queue/reject", {"ids": [payment.id], "reason": "no"})
    assert pending(payment)
    assert not ApprovalPolicy.objects.exists()


def test_a_member_of_the_group_decides_it(people, payment):
    rita = signed_in(people["rita"])
    rita.post(f"/console/approvals/{payment.id}/decide", {"action": "approve"})
    payment.refresh_from_db()
    assert payment.status == ApprovalStatus.COMMITTED
    assert payment.decided_by == "user:rita"


def test_a_viewer_sees_a_routed_request_only_inside_its_group_and_never_decides(people, payment):
    vera, victor = signed_in(people["vera"]), signed_in(people["victor"])
    assert "Pay ACME invoice 42" in vera.get("/console/").content.decode()
    assert vera.get(f"/console/approvals/{payment.id}").status_code == 200
    assert (
        vera.post(f"/console/approvals/{payment.id}/decide", {"action": "approve"}).status_code
        == 403
    )
    assert "Pay ACME invoice 42" not in victor.get("/console/").content.decode()
    assert victor.get(f"/console/approvals/{payment.id}").status_code == 404
    assert pending(payment)


def test_a_superuser_sees_and_decides_every_request(people, payment):
    root = signed_in(people["root"])
    assert "Pay ACME invoice 42" in root.get("/console/").content.decode()
    assert root.get(f"/console/approvals/{payment.id}").status_code == 200
    root.post(f"/console/approvals/{payment.id}/decide", {"action": "reject", "reason": "no"})
    payment.refresh_from_db()
    assert payment.status == ApprovalStatus.REJECTED


def test_next_pending_history_and_the_shard_dashboard_leave_out_requests_routed_elsewhere(
    people, payment
):
    shard("treasury")
    other = ask("treasury", "Top up the float")
    olga = signed_in(people["olga"])
    detail = olga.get(f"/console/approvals/{other.id}").content.decode()
    assert payment.id not in detail  # not offered as "next"
    assert "Pay ACME invoice 42" not in olga.get("/console/history").content.decode()
    assert "Pay ACME invoice 42" not in olga.get("/dashboard/shards/pay.acme").content.decode()
    rita = signed_in(people["rita"])
    assert payment.id in rita.get(f"/console/approvals/{other.id}").content.decode()
    assert "Pay ACME invoice 42" in rita.get("/console/history").content.decode()
    assert "Pay ACME invoice 42" in rita.get("/dashboard/shards/pay.acme").content.decode()


def test_an_unrouted_request_is_seen_and_decided_by_every_officer_as_before(people, payment):
    shard("treasury")
    other = ask("treasury", "Top up the float")
    assert other.approver_group is None
    olga = signed_in(people["olga"])
    assert "Top up the float" in olga.get("/console/").content.decode()
    olga.post(f"/console/approvals/{other.id}/decide", {"action": "approve"})
    other.refresh_from_db()
    assert other.status == ApprovalStatus.COMMITTED
    assert set(routing.approval_recipients(other)) == {
        people["rita"],
        people["olga"],
        people["lena"],
        people["root"],
    }


def test_the_people_told_of_a_routed_request_are_its_groups_deciders(people, payment):
    assert set(routing.approval_recipients(payment)) == {people["rita"]}


def test_a_policy_made_by_an_officer_decides_no_request_routed_away_from_them(people, payment):
    shard("pay.globex")
    policy_create(
        created_by="user:olga",
        author_key=None,
        author_user_id=people["olga"].pk,
        reason="small payments are fine",
        shard_prefix="pay.",
        requested_by="executor",
        key_prefix="",
        when=[],
        effect="approve",
        ttl_seconds=3600,
    )
    later = ask("pay.globex", "Pay Globex")
    assert pending(later)


# --- the API: keys keep their rule; a console session is not a key ----------------


def test_a_console_session_does_not_reach_the_api(people, payment):
    olga = signed_in(people["olga"])
    assert olga.get(f"/api/approvals/{payment.id}").status_code == 401
    assert olga.post(f"/api/approvals/{payment.id}/approve", {}).status_code == 401
    assert pending(payment)


def test_keys_keep_their_scope_rule_whatever_the_routes(make_key, client_for, payment):
    outside = client_for(make_key("shard:read", "approval:decide", shard_prefixes=["treasury"]))
    assert outside.get(f"/api/approvals/{payment.id}").status_code == 403
    assert (
        outside.post(f"/api/approvals/{payment.id}/approve", {}, format="json").status_code == 403
    )
    inside = client_for(make_key("shard:read", "approval:decide", shard_prefixes=["pay."]))
    answer = inside.get(f"/api/approvals/{payment.id}").json()
    assert answer["approver_group"] == "Payments approvers"
    assert answer["escalation_group"] == "Treasury leads"
    assert answer["escalated_at"] is None
    assert inside.post(f"/api/approvals/{payment.id}/approve", {}, format="json").status_code == 200


# --- routes ------------------------------------------------------------------------


def test_the_longest_matching_prefix_wins_and_case_counts(people):
    catch_all = route("", "Everyone else")
    pay = route("pay.", "Payments approvers")
    payroll = route("pay.payroll.", "Payroll")
    assert routing.route_for("pay.payroll.june") == payroll
    assert routing.route_for("pay.acme") == pay
    assert routing.route_for("PAY.acme") == catch_all
    assert routing.route_for("pay_acme") == catch_all  # "_" is no wildcard
    catch_all.delete()
    assert routing.route_for("treasury") is None


def test_a_route_changed_later_does_not_move_a_request_already_made(people, payment):
    ApprovalRoute.objects.filter(shard_prefix="pay.").update(
        approver_group=Group.objects.get(name="Treasury leads")
    )
    payment.refresh_from_db()
    assert payment.approver_group.name == "Payments approvers"
    assert signed_in(people["rita"]).get(f"/console/approvals/{payment.id}").status_code == 200
    assert ask("pay.acme", "Pay again", 200).approver_group.name == "Treasury leads"


def test_an_escalation_time_needs_an_escalation_group():
    group = Group.objects.create(name="Payments approvers")
    with pytest.raises(ValidationError) as refused:
        ApprovalRoute(shard_prefix="pay.", approver_group=group, escalate_after_seconds=60).clean()
    assert "escalation_group" in refused.value.message_dict


def test_admins_manage_routes_in_the_admin(people):
    root = signed_in(people["root"])
    groups = {name: Group.objects.get_or_create(name=name)[0] for name in ("Payments", "Leads")}
    response = root.post(
        "/admin/approvals/approvalroute/add/",
        {
            "shard_prefix": "pay.",
            "approver_group": groups["Payments"].pk,
            "escalate_after_seconds": "60",
            "escalation_group": "",
        },
    )
    assert response.status_code == 200  # the form again, with the error
    assert "An escalation needs a group" in response.content.decode()
    root.post(
        "/admin/approvals/approvalroute/add/",
        {
            "shard_prefix": "pay.",
            "approver_group": groups["Payments"].pk,
            "escalate_after_seconds": "60",
            "escalation_group": groups["Leads"].pk,
        },
    )
    listing = root.get("/admin/approvals/approvalroute/").content.decode()
    assert "pay." in listing and "to Leads after 60 s" in listing


# --- escalation --------------------------------------------------------------------


def escalations(approval: Approval) -> tuple[int, int]:
    """(audit entries, webhook deliveries) of its escalation."""
    return (
        AuditEntry.objects.filter(
            action=AuditAction.APPROVAL_ESCALATED, details__approval_id=approval.id
        ).count(),
        WebhookDelivery.objects.filter(event="approval.escalated", approval_id=approval.id).count(),
    )


def subscribed() -> None:
    WebhookSubscription.objects.create(
        name="ops", url="http://127.0.0.1:9/hook", events=["approval.escalated"]
    )


def test_an_undecided_request_escalates_to_the_second_group_on_time(people):
    subscribed()
    route("pay.", "Payments approvers", after=600, to="Treasury leads")
    shard("pay.acme")
    with time_machine.travel("2026-12-07 10:00:00Z", tick=False) as clock:
        payment = ask("pay.acme", "Pay ACME invoice 42")
        lena = signed_in(people["lena"])
        assert lena.get(f"/console/approvals/{payment.id}").status_code == 404
        clock.shift(timedelta(seconds=599))
        assert approval_escalate_due() == 0
        assert escalations(payment) == (0, 0)
        clock.shift(timedelta(seconds=1))
        assert approval_escalate_due() == 1
        assert approval_escalate_due() == 0
        assert escalations(payment) == (1, 1)
        payment.refresh_from_db()
        assert payment.escalated_at == payment.escalate_at
        assert set(routing.approval_recipients(payment)) == {people["rita"], people["lena"]}
        assert set(routing.escalation_recipients(payment)) == {people["lena"]}
        assert "Pay ACME invoice 42" in lena.get("/console/").content.decode()
        lena.post(f"/console/approvals/{payment.id}/decide", {"action": "approve"})
    payment.refresh_from_db()
    assert payment.status == ApprovalStatus.COMMITTED
    assert payment.decided_by == "user:lena"
    # The first group keeps it: an escalation adds deciders, it takes none away.
    assert signed_in(people["rita"]).get(f"/console/approvals/{payment.id}").status_code == 200


def test_a_request_decided_before_its_escalation_never_escalates(people):
    route("pay.", "Payments approvers", after=600, to="Treasury leads")
    shard("pay.acme")
    with time_machine.travel("2026-12-07 10:00:00Z", tick=False) as clock:
        payment = ask("pay.acme", "Pay ACME invoice 42")
        clock.shift(timedelta(seconds=599))
        approval_decide(
            approval_id=payment.id,
            decider=Decider.user(people["rita"]),
            approve=False,
            reason="not this month",
        )
        clock.shift(timedelta(hours=1))
        assert approval_escalate_due() == 0
    payment.refresh_from_db()
    assert payment.escalated_at is None
    assert escalations(payment) == (0, 0)


def test_the_beat_task_and_the_servers_tick_both_escalate(people):
    from approvals.tasks import expire_approvals
    from shards.hooks import tick_sweeps_run

    route("pay.", "Payments approvers", after=60, to="Treasury leads")
    shard("pay.acme")
    shard("pay.globex")
    with time_machine.travel("2026-12-07 10:00:00Z", tick=False) as clock:
        first = ask("pay.acme", "Pay ACME")
        clock.shift(timedelta(seconds=61))
        expire_approvals()
        second = ask("pay.globex", "Pay Globex")
        clock.shift(timedelta(seconds=61))
        tick_sweeps_run()
    assert escalations(first)[0] == escalations(second)[0] == 1


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_escalate_a_request_once(people):
    subscribed()
    route("pay.", "Payments approvers", after=60, to="Treasury leads")
    shard("pay.acme")
    with time_machine.travel("2026-12-07 10:00:00Z", tick=False) as clock:
        payment = ask("pay.acme", "Pay ACME invoice 42")
        clock.shift(timedelta(seconds=61))
        start = threading.Barrier(2)
        counts: list[int] = []

        def sweep() -> None:
            from django.db import connection

            start.wait()
            try:
                counts.append(approval_escalate_due())
            finally:
                connection.close()

        threads = [threading.Thread(target=sweep) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert sorted(counts) == [0, 1]
    assert escalations(payment) == (1, 1)


def test_staff_outside_the_group_do_not_find_the_request_in_the_admin(people, payment):
    from django.contrib.auth.models import Permission

    staff = person("stan", "Risk officers", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_approval"))
    listing = signed_in(staff).get("/admin/approvals/approval/")
    assert listing.status_code == 200
    assert payment.id not in listing.content.decode()
    assert (
        payment.id in signed_in(people["root"]).get("/admin/approvals/approval/").content.decode()
    )
