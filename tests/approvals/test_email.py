"""Email to risk officers (issue 28), through a real SMTP server on this machine
(aiosmtpd): what officers receive, who receives nothing, retries against a dead
server that never slow a decision, the reminder, and one mail through bin/serve's
own worker."""

from __future__ import annotations

import email
import email.policy
import socket
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from email.message import EmailMessage as Received
from typing import Any

import httpx
import pytest
import time_machine
from aiosmtpd.controller import Controller
from django.contrib.auth.models import Group, User
from django.core.mail import EmailMessage
from django.test import Client
from django.utils import timezone

from access.identity import Actor
from access.services import api_key_create
from approvals import emails
from approvals.models import Approval, EmailAttempt, EmailDelivery
from approvals.tasks import expire_approvals
from shards.services import shard_create
from tests.approvals.conftest import officer
from tests.conftest import _free_port
from tests.supervision import test_supervisor

pytestmark = [pytest.mark.django_db(transaction=True)]

serve = test_supervisor.serve  # bin/serve (server, worker, beat) as a fixture here too

PUBLIC_URL = "https://zerolock.example"
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


@dataclass
class Inbox:
    """What the SMTP server was handed: envelope recipients and parsed messages."""

    messages: list[tuple[list[str], Received]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, Received)
        self.messages.append((list(envelope.rcpt_tos), message))
        self.arrived.set()
        return "250 Message accepted for delivery"

    def wait(self, count: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while len(self.messages) < count:
            assert time.monotonic() < deadline, f"{len(self.messages)} of {count} mails arrived"
            time.sleep(0.05)


@dataclass
class Smtp:
    inbox: Inbox
    port: int
    controller: Controller | None = None

    def start(self) -> None:
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None


@pytest.fixture
def smtp(settings) -> Iterator[Smtp]:
    """A real SMTP server on a free port, and the settings that point at it
    (pytest-django swaps in the in-memory backend; mail here goes over SMTP)."""
    server = Smtp(Inbox(), _free_port())
    server.start()
    settings.EMAIL_BACKEND = SMTP_BACKEND
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    settings.EMAIL_TIMEOUT = 2.0
    settings.ZEROLOCK_PUBLIC_URL = PUBLIC_URL
    yield server
    server.stop()


@pytest.fixture
def api(make_key, client_for) -> tuple[Any, Any]:
    """A treasury (irreversible, quorum 1), the executor agent that asks, and an
    officer's API key that decides."""
    shard_create(
        actor=Actor("treasurer"),
        shard_id="treasury",
        shard_type="decision",
        initial_value={"balance": 1000},
        reversible=False,
    )
    executor = client_for(
        make_key("shard:read", "approval:request", agents=["executor"], name="payments bot"),
        "executor",
    )
    decider = client_for(make_key("shard:read", "approval:decide"), "officer")
    return executor, decider


def ask(executor: Any, description: str = "Pay ACME", ttl: int = 3600, **extra: Any) -> str:
    response = executor.post(
        "/api/approvals/request",
        {
            "shard_id": "treasury",
            "proposed_value": {"balance": 750},
            "expected_version": 1,
            "description": description,
            "ttl_seconds": ttl,
            **extra,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


def officer_with(name: str, address: str) -> User:
    user = officer(name)
    user.email = address
    user.save(update_fields=["email"])
    return user


def viewer_with(name: str, address: str) -> User:
    user = User.objects.create_user(name, email=address, password="x")
    user.groups.add(Group.objects.get(name="Viewers"))
    return user


def work_the_queue() -> list[str]:
    """What the worker does with each queued mail: one attempt (the tests that run
    a real worker are the live one below)."""
    return [
        emails.deliver(delivery_id)
        for delivery_id in EmailDelivery.objects.filter(
            status__in=["pending", "retrying"]
        ).values_list("id", flat=True)
    ]


def text_of(message: Received) -> str:
    part = message.get_body(("plain",))
    assert part is not None
    return str(part.get_content()).replace("\r\n", "\n")  # SMTP carries CRLF


def test_an_officer_with_an_address_receives_the_mail_for_a_new_request(smtp, api):
    executor, _ = api
    officer_with("rita", "rita@bank.example")
    hostile = (
        "\n  Pay ACME\u202e now\x1b\r\nBcc: mallory@evil.example\r\n\r\n"
        "Invoice 4711, due Friday.\u2028Subject: approved"
    )

    approval_id = ask(executor, hostile)
    assert work_the_queue() == ["sent"]

    smtp.inbox.wait(1, 5)
    [(recipients, message)] = smtp.inbox.messages
    assert recipients == ["rita@bank.example"]
    assert message["To"] == "rita@bank.example"
    assert message["From"] == "ZeroLock <zerolock@localhost>"
    assert message["Bcc"] is None
    assert message["Subject"] == "[ZeroLock] Approval requested: Pay ACME now (treasury)"
    assert message["X-ZeroLock-Approval"] == approval_id
    assert message["Auto-Submitted"] == "auto-generated"
    text = text_of(message)
    link = f"{PUBLIC_URL}/console/approvals/{approval_id}"
    assert f"Review and decide in the console (sign-in required):\n{link}\n" in text
    assert "  replace /balance: 1000 -> 750\n" in text
    assert 'Requested by: executor (key "payments bot")' in text
    # The agent's words are quoted as its own, line by line, control characters gone.
    assert "> Bcc: mallory@evil.example\n" in text
    assert "> Invoice 4711, due Friday.\n> Subject: approved\n" in text
    assert "\x1b" not in text and "\u202e" not in text
    # Deciding takes a sign-in: the only address in the mail is the detail page's.
    assert text.count("http") == 2  # the link, and the server's address in the signature
    assert "/approve" not in text and "token" not in text.lower()
    delivery = EmailDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.event) == ("sent", 1, "approval.requested")
    assert delivery.sent_at is not None and delivery.user is not None


def test_an_officer_without_an_address_and_a_user_who_may_not_decide_get_nothing(smtp, api):
    executor, _ = api
    officer_with("rita", "rita@bank.example")
    officer_with("rita-again", "RITA@bank.example")  # the same mailbox: one mail
    officer("sam")  # may decide, has no address
    viewer_with("vera", "vera@bank.example")  # has an address, may only look
    officer_with("otto", "otto@bank.example\nBcc: mallory@evil.example")  # not an address
    inactive = officer_with("ida", "ida@bank.example")
    inactive.is_active = False
    inactive.save()

    ask(executor)
    work_the_queue()

    smtp.inbox.wait(1, 5)
    time.sleep(0.2)
    assert [recipients for recipients, _ in smtp.inbox.messages] == [["rita@bank.example"]]
    assert list(EmailDelivery.objects.values_list("to", flat=True)) == ["rita@bank.example"]


def test_a_request_a_standing_policy_decides_mails_nobody(smtp, api, make_key, client_for):
    executor, _ = api
    officer_with("rita", "rita@bank.example")
    author = client_for(make_key("shard:read", "approval:policy", name="risk desk"), "desk")
    response = author.post(
        "/api/approval-policies",
        {"shard_prefix": "treasury", "effect": "approve", "ttl_seconds": 3600, "reason": "ok"},
        format="json",
    )
    assert response.status_code == 201, response.content

    approval_id = ask(executor)

    assert Approval.objects.get(pk=approval_id).status == "committed"
    assert not EmailDelivery.objects.exists()
    assert work_the_queue() == [] and smtp.inbox.messages == []


def test_with_no_email_host_nothing_is_recorded_and_the_console_says_so(settings, api):
    executor, _ = api
    settings.EMAIL_HOST = ""
    rita = officer_with("rita", "rita@bank.example")
    vera = viewer_with("vera", "vera@bank.example")

    ask(executor)
    assert not EmailDelivery.objects.exists()

    notice = "Email is off: no <code>EMAIL_HOST</code> is set, so officers are not emailed."
    browser = Client()
    browser.force_login(rita)
    assert notice in browser.get("/console/").content.decode()
    browser.force_login(vera)  # may not decide: mail was never hers to miss
    assert notice not in browser.get("/console/").content.decode()
    settings.EMAIL_HOST = "127.0.0.1"
    browser.force_login(rita)
    assert notice not in browser.get("/console/").content.decode()


def test_a_dead_mail_server_delays_no_decision_and_the_retry_delivers(smtp, api, settings):
    executor, decider = api
    officer_with("rita", "rita@bank.example")
    smtp.stop()
    # Where the mail server was, a socket that takes connections and never answers.
    hanging = socket.socket()
    hanging.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    hanging.bind(("127.0.0.1", smtp.port))
    hanging.listen(16)
    settings.EMAIL_TIMEOUT = 2.0
    try:
        approval_id = ask(executor)
        [delivery] = EmailDelivery.objects.all()
        # The worker's attempt hangs on the dead server while the officer decides.
        attempt: list[str] = []
        worker = threading.Thread(target=lambda: attempt.append(emails.deliver(delivery.id)))
        worker.start()
        time.sleep(0.2)
        started = time.monotonic()
        response = decider.post(f"/api/approvals/{approval_id}/approve")
        took = time.monotonic() - started
        assert response.status_code == 200 and response.json()["status"] == "committed"
        assert took < 1.0, took  # well under the attempt's 2 s wait, on a loaded machine too
        assert Approval.objects.get(pk=approval_id).status == "committed"
        worker.join(10)
    finally:
        hanging.close()
    assert attempt == ["retrying"]
    delivery.refresh_from_db()
    assert delivery.status == "retrying" and delivery.attempts == 1
    assert "timed out" in delivery.last_error, delivery.last_error
    [tried] = EmailAttempt.objects.filter(delivery=delivery)
    assert not tried.ok and tried.error == delivery.last_error
    assert 1900 <= tried.duration_ms < 6000, tried.duration_ms  # EMAIL_TIMEOUT bounds the wait
    # The webhook schedule: the first retry 10 s after the first failure.
    wait = (delivery.next_attempt_at - tried.started_at).total_seconds()
    assert 10 <= wait < 15, wait

    smtp.start()  # back, on the same port
    assert emails.deliver(delivery.id) == "sent"
    smtp.inbox.wait(1, 5)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("sent", 2, "")
    assert smtp.inbox.messages[0][1]["X-ZeroLock-Approval"] == approval_id


def test_a_delivery_that_used_its_schedule_is_failed_and_admin_sends_it_again(smtp, api, settings):
    executor, _ = api
    officer_with("rita", "rita@bank.example")
    settings.ZEROLOCK_WEBHOOK_MAX_ATTEMPTS = 2
    smtp.stop()  # refused: nothing listens
    ask(executor)
    [delivery] = EmailDelivery.objects.all()
    assert emails.deliver(delivery.id) == "retrying"
    assert emails.deliver(delivery.id) == "failed"
    assert emails.deliver(delivery.id) == "skipped"  # given up: the task does nothing more
    delivery.refresh_from_db()
    assert "Connection refused" in delivery.last_error, delivery.last_error

    root = User.objects.create_superuser("root", "", "x")
    admin = Client()
    admin.force_login(root)
    listing = admin.get("/admin/approvals/emaildelivery/").content.decode()
    assert "rita@bank.example" in listing and "failed" in listing
    smtp.start()
    answer = admin.post(
        "/admin/approvals/emaildelivery/",
        {"action": "send_again", "_selected_action": [delivery.pk], "index": "0"},
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert emails.deliver(delivery.id) == "sent"  # one more attempt, as the worker makes it
    smtp.inbox.wait(1, 5)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("sent", 3)


def test_the_reminder_goes_out_once_at_the_lead_time(smtp, api, settings):
    executor, _ = api
    officer_with("rita", "rita@bank.example")
    settings.ZEROLOCK_APPROVAL_REMINDER_SECONDS = 300
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        approval_id = ask(executor, ttl=3600)
        ask(executor, "Pay BETA", ttl=120)  # its whole life is inside the lead
        work_the_queue()
        smtp.inbox.wait(2, 5)

        def reminders() -> list[str]:
            return list(
                EmailDelivery.objects.filter(event="approval.expiring").values_list(
                    "approval_id", flat=True
                )
            )

        clock.move_to(start + timedelta(seconds=1))
        expire_approvals()  # the short one is inside the lead already: its first mail said so
        assert reminders() == []
        clock.move_to(start + timedelta(seconds=3600 - 301))
        expire_approvals()
        assert reminders() == []
        clock.move_to(start + timedelta(seconds=3600 - 299))
        expire_approvals()
        assert reminders() == [approval_id]
        clock.move_to(start + timedelta(seconds=3600 - 290))
        expire_approvals()  # the next beat tick sends nothing more
        assert reminders() == [approval_id]
        assert work_the_queue() == ["sent"]

    smtp.inbox.wait(3, 5)
    _, reminder = smtp.inbox.messages[2]
    assert reminder["Subject"] == "[ZeroLock] Approval expiring soon: Pay ACME (treasury)"
    assert "expires in about 5 minutes" in text_of(reminder)


def test_a_queued_mail_whose_attempt_never_ran_is_queued_again_by_the_sweep(smtp, api):
    executor, _ = api
    officer_with("rita", "rita@bank.example")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        ask(executor)  # queued after commit; no worker takes it here
        [delivery] = EmailDelivery.objects.all()
        clock.move_to(start + timedelta(seconds=30))
        assert emails.resend_stuck() == 0  # not yet overdue
        clock.move_to(start + timedelta(seconds=61))
        assert emails.resend_stuck() == 1
        delivery.refresh_from_db()
        assert delivery.next_attempt_at == start + timedelta(seconds=61)
        assert emails.resend_stuck() == 0  # queued again once, not every tick


def test_escalation_mails_the_people_it_names_with_nothing_else_to_pass(smtp, api):
    executor, _ = api
    approval_id = ask(executor)
    desk = [officer_with("erin", "erin@bank.example"), officer("sam")]

    ids = emails.email_officers("approval.escalated", Approval.objects.get(pk=approval_id), desk)

    assert len(ids) == 1
    work_the_queue()
    smtp.inbox.wait(1, 5)
    recipients, message = smtp.inbox.messages[0]
    assert recipients == ["erin@bank.example"]
    assert message["Subject"] == "[ZeroLock] Approval escalated: Pay ACME (treasury)"


@pytest.mark.parametrize(
    "description",
    [
        "line one\nline two",
        "\r\n\r\nafter blank lines\rand a carriage return",
        "x" * 4000,
        "vertical\x0btab\x0cform\x1cfeed\x85next\u2028line\u2029para",
        "\u202eevil\u200b override \x7f\x1b[31m red",
        "   ",
        "\u202e\u200b\n\x7f",
        "ünïcödé ✓ " * 40,
    ],
)
def test_a_subject_is_one_short_line_whatever_the_agent_writes(description, api):
    executor, _ = api
    approval = Approval.objects.get(pk=ask(executor, description))
    subject = emails.subject("approval.requested", approval)
    assert len(subject) <= emails.SUBJECT_MAX
    assert subject.startswith("[ZeroLock] Approval requested: ")
    assert subject.endswith(" (treasury)")
    assert subject == subject.strip() and "  " not in subject
    assert not subject.startswith("[ZeroLock] Approval requested: (treasury)")  # says something
    assert len(subject.splitlines()) == 1
    # No control, format or separator character: no header tricks, no bidi spoofing.
    assert not [c for c in subject if unicodedata.category(c)[0] == "C" or c in "\u2028\u2029"]
    # Django would raise BadHeaderError on a line break; this must build.
    built = EmailMessage(subject, "body", "a@b.example", ["c@d.example"]).message()
    assert "\n" not in str(built["Subject"]).replace("\n ", "")


@pytest.mark.live
def test_through_the_real_worker_a_new_request_reaches_the_smtp_server(
    serve: Callable[..., Any], smtp: Smtp
) -> None:
    """bin/serve (server, worker, beat) with EMAIL_HOST in its environment."""
    officer_with("rita", "rita@bank.example")
    shard_create(
        actor=Actor("treasurer"),
        shard_id="treasury",
        shard_type="decision",
        initial_value={"balance": 1000},
        reversible=False,
    )
    _, key = api_key_create(
        name="payments bot", permissions=["shard:read", "approval:request"], agent_ids=["executor"]
    )
    served = serve(
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(smtp.port),
        EMAIL_TIMEOUT="5",
        ZEROLOCK_PUBLIC_URL=PUBLIC_URL,
    )
    started = time.monotonic()
    response = httpx.post(
        f"{served.url}/api/approvals/request",
        headers={"X-API-Key": key, "X-Agent-Id": "executor"},
        json={
            "shard_id": "treasury",
            "proposed_value": {"balance": 750},
            "expected_version": 1,
            "description": "Pay ACME",
        },
        timeout=10,
    )
    assert response.status_code == 201, response.text
    approval_id = response.json()["id"]
    try:
        smtp.inbox.wait(1, 30)
    except AssertionError:
        raise AssertionError(served.text()[-4000:]) from None
    took = time.monotonic() - started
    recipients, message = smtp.inbox.messages[0]
    assert recipients == ["rita@bank.example"]
    assert message["Subject"] == "[ZeroLock] Approval requested: Pay ACME (treasury)"
    assert f"{PUBLIC_URL}/console/approvals/{approval_id}" in text_of(message)

    def recorded() -> bool:
        return EmailDelivery.objects.filter(approval_id=approval_id, status="sent").exists()

    deadline = time.monotonic() + 10
    while not recorded():
        assert time.monotonic() < deadline, "the worker did not record the mail as sent"
        time.sleep(0.1)
    print(f"the request's mail reached the SMTP server {took * 1000:.0f} ms after the request")


def test_a_routed_request_mails_its_group_and_on_escalation_the_second_group(smtp, api):
    """Routing and email together: the request goes to the payments approvers'
    mailboxes only, and when nobody decided within escalate_after_seconds, the
    treasury leads are mailed too (and only they, on that event)."""
    from approvals.models import ApprovalRoute
    from approvals.services import approval_escalate_due

    executor, _ = api
    payments = Group.objects.create(name="Payments approvers")
    leads = Group.objects.create(name="Treasury leads")
    ApprovalRoute.objects.create(
        shard_prefix="treas",
        approver_group=payments,
        escalate_after_seconds=600,
        escalation_group=leads,
    )
    rita = officer_with("rita", "rita@bank.example")
    rita.groups.add(payments)
    lena = officer_with("lena", "lena@bank.example")
    lena.groups.add(leads)
    officer_with("olga", "olga@bank.example")  # an officer outside both groups

    with time_machine.travel(timezone.now(), tick=False) as clock:
        approval_id = ask(executor)
        work_the_queue()
        smtp.inbox.wait(1, 5)
        assert [r for r, _ in smtp.inbox.messages] == [["rita@bank.example"]]

        clock.shift(599)
        assert approval_escalate_due() == 0
        clock.shift(2)
        assert approval_escalate_due() == 1
        assert approval_escalate_due() == 0  # once
    work_the_queue()
    smtp.inbox.wait(2, 5)
    recipients, message = smtp.inbox.messages[1]
    assert recipients == ["lena@bank.example"]
    assert message["Subject"] == "[ZeroLock] Approval escalated: Pay ACME (treasury)"
    assert f"/console/approvals/{approval_id}" in text_of(message)
    assert len(smtp.inbox.messages) == 2  # olga heard nothing
