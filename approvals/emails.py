"""Email to risk officers about approvals that wait for them.

Each mail is one ``EmailDelivery`` row per address, written inside the
transaction that caused it with its subject and body already made; after that
transaction commits, a Celery task sends it (``approvals.tasks.deliver_email``)
through Django's email backend (SMTP: ``EMAIL_HOST`` and friends). A dead mail
server costs the worker ``EMAIL_TIMEOUT`` per attempt, never an officer a slow
decision. A failed attempt is retried on the webhooks' schedule
(``webhooks.retry_delay``, ``webhooks.max_attempts``); every attempt is recorded
and shown in admin, which can send a delivery again.

Events: ``approval.requested`` (a new request still pending after the standing
policies had their say), ``approval.expiring`` (the reminder, once per
approval and address, ``ZEROLOCK_APPROVAL_REMINDER_SECONDS`` before expiry)
and ``approval.escalated`` (whoever escalates names the people).

The mail informs; it never decides. It holds no token and no decide link:
deciding takes a sign-in to the console, which the mail links to.

The agent's text is hostile here too: in the subject (a header) every control
character and line break becomes a space, so Django's ``BadHeaderError`` can
never be raised by it; in the body it is clamped and quoted, so it reads as the
agent's words, not the server's."""

from __future__ import annotations

import logging
import secrets
import time
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from common.queued import queue_each

from . import webhooks
from .models import (
    Approval,
    EmailAttempt,
    EmailDelivery,
    EmailDeliveryStatus,
    EmailEvent,
)
from .review import change_summary
from .routing import approval_recipients

logger = logging.getLogger(__name__)

SUBJECT_MAX = 120  # characters of a subject, the agent's words clamped to fit
DESCRIPTION_MAX = 2000  # characters of the description in a body
SUMMARY_ROWS = webhooks.PAYLOAD_CHANGES  # the change as the webhook payload has it
ROW_MAX = 400  # characters of one line of the change summary
SENDER = "ZeroLock"

HEADLINES = {
    EmailEvent.REQUESTED: "Approval requested",
    EmailEvent.EXPIRING: "Approval expiring soon",
    EmailEvent.ESCALATED: "Approval escalated",
}


def email_enabled() -> bool:
    """Email is on when a mail server is named (``EMAIL_HOST``)."""
    return bool(settings.EMAIL_HOST)


def reminder_seconds() -> int:
    return settings.ZEROLOCK_APPROVAL_REMINDER_SECONDS


# --- the message ---------------------------------------------------------------


def _clamp(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def one_line(text: str, limit: int) -> str:
    """``text`` safe for a header: every control, format and separator character
    (CR, LF, NEL, U+2028, bidi overrides, ...) becomes a space, runs of spaces one
    space, and the result at most ``limit`` characters."""
    spaced = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in text)
    return _clamp(" ".join(spaced.split()), limit)


def _text_block(text: str, limit: int) -> str:
    """Several lines of the agent's text: line breaks kept (any kind becomes
    ``\\n``), other control and format characters dropped, clamped."""
    out = []
    for line in text.splitlines():
        out.append("".join(c for c in line if c == "\t" or unicodedata.category(c)[0] != "C"))
    return _clamp("\n".join(out).strip("\n"), limit)


def title(approval: Approval) -> str:
    """The request in a few words: the description's first line that says something."""
    for line in approval.description.splitlines():
        if words := one_line(line, SUBJECT_MAX):  # a line of bidi marks says nothing
            return words
    return "(no description)"


def subject(event: str, approval: Approval) -> str:
    """One line, at most ``SUBJECT_MAX`` characters, whatever the agent wrote:
    ``[ZeroLock] Approval requested: Pay ACME (treasury)``."""
    head = f"[{SENDER}] {HEADLINES.get(EmailEvent(event), event)}: "
    tail = f" ({one_line(approval.shard_id, 60)})"
    room = max(20, SUBJECT_MAX - len(head) - len(tail))
    return one_line(head + _clamp(title(approval), room) + tail, SUBJECT_MAX)


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _minutes(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def _change_lines(approval: Approval) -> list[str]:
    if approval.diff is None:
        why = f" ({approval.diff_omitted})" if approval.diff_omitted else ""
        return [f"  Too large to summarise here{why}: the console shows both values."]
    summary = change_summary(approval.diff, approval.value_at_request, limit=SUMMARY_ROWS)
    if not summary.rows:
        return ["  No change: the proposed value is the current one."]
    lines = []
    for row in summary.rows:
        if row.old and row.new:
            what = f"{row.old} -> {row.new}"
        elif row.new:
            what = row.new
        else:
            what = f"(was {row.old})" if row.old else ""
        lines.append("  " + one_line(f"{row.op} {_clamp(row.where, 200)}: {what}", ROW_MAX))
    if summary.more:
        lines.append(f"  … and {summary.more} more")
    return lines


def body(event: str, approval: Approval, now: datetime | None = None) -> str:
    """The plain-text body: what is asked, by whom, until when, the change in
    short, and the console's page for it (sign-in required)."""
    now = now or timezone.now()
    left = (approval.expires_at - now).total_seconds()
    intro = {
        EmailEvent.REQUESTED: "An agent asks for a change that needs an approval.",
        EmailEvent.EXPIRING: (
            f"Reminder: this request is still waiting for a decision and expires in "
            f"about {_minutes(left)}."
        ),
        EmailEvent.ESCALATED: (
            "This request was escalated to you: it is still waiting for a decision."
        ),
    }[EmailEvent(event)]
    asked = one_line(approval.requested_by, 128)
    if approval.requested_key_name:
        asked += f' (key "{one_line(approval.requested_key_name, 100)}")'
    quorum = (
        [f"Approvals:    {approval.approvals_counted()} of {approval.approvals_required}"]
        if approval.approvals_required > 1
        else []
    )
    description = _text_block(approval.description, DESCRIPTION_MAX) or "(none)"
    link = webhooks.console_url(f"/console/approvals/{approval.id}")
    lines = [
        intro,
        "",
        f"Shard:        {one_line(approval.shard_id, 128)}",
        f"Requested by: {asked}",
        f"Requested at: {_when(approval.created_at)}",
        f"Expires at:   {_when(approval.expires_at)}",
        *quorum,
        "",
        "The agent's description (its own words):",
        *(f"> {line}" for line in description.split("\n")),
        "",
        "The change:",
        *_change_lines(approval),
        "",
        "Review and decide in the console (sign-in required):",
        link,
        "",
        "--",
        f"{SENDER} ({settings.ZEROLOCK_PUBLIC_URL}). You get this mail because you may "
        "decide this request. It cannot decide anything itself: only the console can.",
    ]
    return "\n".join(lines) + "\n"


# --- recording ------------------------------------------------------------------


def _addresses(users: Iterable[AbstractBaseUser]) -> list[tuple[AbstractBaseUser, str]]:
    """(user, address) for each user with a usable address, one per address
    (compared without case): the earliest account's (by id), so which of two
    users sharing a mailbox is mailed does not depend on the database's order."""
    seen: set[str] = set()
    out = []
    for user in sorted(users, key=lambda user: user.pk):
        address = (getattr(user, "email", "") or "").strip()
        if not address or address.lower() in seen:
            continue
        try:
            validate_email(address)
        except ValidationError:
            # Never reaches a header: a newline in an address raises BadHeaderError.
            logger.warning("user %s has an invalid email address; not emailed", user.pk)
            continue
        seen.add(address.lower())
        out.append((user, address))
    return out


def email_officers(event: str, approval: Approval, users: Iterable[AbstractBaseUser]) -> list[str]:
    """Inside the transaction of the change: one delivery per user with an email
    address (one per address), sent after the commit. With email off
    (no ``EMAIL_HOST``) nothing is recorded and nothing sent."""
    if not email_enabled():
        return []
    recipients = _addresses(users)
    if not recipients:
        return []
    text_subject, text_body = subject(event, approval), body(event, approval)
    ids = []
    for user, address in recipients:
        delivery = EmailDelivery.objects.create(
            id=f"eml_{secrets.token_hex(12)}",
            approval_id=approval.id,
            event=event,
            user_id=user.pk,
            to=address,
            subject=text_subject,
            body=text_body,
        )
        ids.append(delivery.id)
    transaction.on_commit(lambda: enqueue(ids))
    return ids


def send_again(ids: list[str]) -> int:
    """Sends these deliveries again now, whatever became of them (admin's "Send
    again"). One that had used up its schedule gets one attempt; one still inside
    it carries on."""
    count = EmailDelivery.objects.filter(pk__in=ids).update(
        status=EmailDeliveryStatus.RETRYING, next_attempt_at=timezone.now()
    )
    transaction.on_commit(lambda: enqueue(ids))
    return count


# --- sending --------------------------------------------------------------------

DELIVER_TASK = "approvals.tasks.deliver_email"


def enqueue(ids: list[str], countdown: float = 0) -> None:
    """Hands deliveries to Celery (``common.queued``: a broker that is down leaves
    them pending for the periodic sweep, ``resend_stuck``)."""
    queue_each(DELIVER_TASK, ids, countdown=countdown, what="email")


def deliver(delivery_id: str) -> str:
    """One attempt (the Celery task's body); schedules the next on failure."""
    delivery = EmailDelivery.objects.filter(pk=delivery_id).first()
    if delivery is None or delivery.status in (
        EmailDeliveryStatus.SENT,
        EmailDeliveryStatus.FAILED,
    ):
        return "skipped"
    message = EmailMessage(
        subject=one_line(delivery.subject, SUBJECT_MAX),
        body=delivery.body,
        from_email=settings.ZEROLOCK_EMAIL_FROM,
        to=[delivery.to],
        headers={
            # RFC 3834: no vacation replies to a machine's mail.
            "Auto-Submitted": "auto-generated",
            "X-ZeroLock-Approval": delivery.approval_id,
            "X-ZeroLock-Event": delivery.event,
        },
    )
    number = delivery.attempts + 1
    started, clock = timezone.now(), time.monotonic()
    error = ""
    try:
        connection = get_connection(fail_silently=False, timeout=settings.EMAIL_TIMEOUT)
        message.connection = connection
        ok = message.send() == 1
        if not ok:
            error = "the mail backend sent nothing"
    except Exception as exc:  # smtplib's, socket's and ssl's errors alike: record, retry
        ok, error = False, f"{type(exc).__name__}: {exc}"[:500]
        logger.warning("email %s to %s failed: %s", delivery.id, delivery.to, error)
    EmailAttempt.objects.create(
        delivery=delivery,
        number=number,
        started_at=started,
        duration_ms=int((time.monotonic() - clock) * 1000),
        error=error,
        ok=ok,
    )
    delivery.attempts, delivery.last_error = number, error
    if ok:
        delivery.status, delivery.sent_at = EmailDeliveryStatus.SENT, timezone.now()
    elif number >= webhooks.max_attempts():
        delivery.status = EmailDeliveryStatus.FAILED
    else:
        delivery.status = EmailDeliveryStatus.RETRYING
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=webhooks.retry_delay(number))
    delivery.save(update_fields=["attempts", "status", "sent_at", "next_attempt_at", "last_error"])
    if delivery.status == EmailDeliveryStatus.RETRYING:
        enqueue([delivery.id], countdown=webhooks.retry_delay(number))
    return delivery.status


# --- the periodic sweeps (tasks.expire_approvals) ------------------------------


def remind_expiring(now: datetime | None = None) -> int:
    """The reminder (``approval.expiring``), once per approval and address, when a
    pending approval comes within ``ZEROLOCK_APPROVAL_REMINDER_SECONDS`` of its
    deadline. Not for a request whose whole life was shorter than that: its
    first mail already said when it expires. Returns the mails queued."""
    if not email_enabled():
        return 0
    now = now or timezone.now()
    lead = timedelta(seconds=reminder_seconds())
    due = (
        Approval.objects.pending(now)
        .filter(expires_at__lte=now + lead, created_at__lte=F("expires_at") - lead)
        .exclude(
            id__in=EmailDelivery.objects.filter(event=EmailEvent.EXPIRING).values("approval_id")
        )
        .order_by("expires_at")
    )
    sent = 0
    for approval in due[:500]:
        try:
            with transaction.atomic():
                sent += len(
                    email_officers(EmailEvent.EXPIRING, approval, approval_recipients(approval))
                )
        except IntegrityError:  # another sweep got there first
            continue
    return sent


def resend_stuck(now: datetime | None = None) -> int:
    """Deliveries whose queued attempt never ran (broker down, worker killed
    holding it): queue them again, a while after they were due."""
    now = now or timezone.now()
    stuck = EmailDelivery.objects.filter(
        status__in=[EmailDeliveryStatus.PENDING, EmailDeliveryStatus.RETRYING],
        next_attempt_at__lte=now - timedelta(seconds=60),
    )
    ids = list(stuck.values_list("id", flat=True)[:200])
    if ids:
        EmailDelivery.objects.filter(pk__in=ids).update(next_attempt_at=now)
        enqueue(ids)
    return len(ids)
