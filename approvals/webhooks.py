"""Webhooks for approval events, signed in the style of Standard Webhooks.

Each event makes one ``WebhookDelivery`` row per active subscription that
wants it, inside the transaction that caused it; after that transaction
commits, a Celery task POSTs it (``approvals.tasks.deliver_webhook``). Nothing
here waits on an endpoint: a dead one costs the worker a timeout, never the
officer a slow decision.

On the wire, a JSON POST with
    webhook-id:        msg_<hex>            (the delivery's id; stable across retries)
    webhook-timestamp: <unix seconds>
    webhook-signature: v1,<base64 HMAC-SHA256 over "<id>.<timestamp>.<body>">
keyed with the base64-decoded part of the subscription's ``whsec_`` secret.
A failed attempt is retried with exponential backoff (``retry_delays``: by
default 10 s doubling up to an hour, 15 attempts over about 6.4 hours); every
attempt is recorded and shown in admin, where an admin can also redeliver a
delivery or send a subscription a test event.

A subscription whose ``format`` is ``slack`` or ``teams`` gets the same event
as a chat message (approvals.chat) with the same headers; the stored payload
is the standard one either way."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from common.inputs import iso_time
from common.queued import queue_each

from . import chat
from .models import (
    Approval,
    ApprovalStatus,
    WebhookAttempt,
    WebhookDelivery,
    WebhookDeliveryStatus,
    WebhookEvent,
    WebhookSubscription,
    status_label,
)
from .review import change_summary

logger = logging.getLogger(__name__)
PAYLOAD_CHANGES = 10  # rows of the change summary in a payload; "change_more" counts the rest


def retry_base_seconds() -> float:
    return settings.ZEROLOCK_WEBHOOK_RETRY_BASE_SECONDS


def retry_delay(number: int) -> float:
    """The wait after failed attempt ``number`` (1-based): doubling from the base,
    capped, so the schedule reaches hours rather than ending in minutes."""
    return min(
        retry_base_seconds() * 2 ** (number - 1), settings.ZEROLOCK_WEBHOOK_RETRY_MAX_SECONDS
    )


def retry_delays() -> list[float]:
    """The whole schedule: the waits between the attempts of one delivery."""
    return [retry_delay(number) for number in range(1, max_attempts())]


def max_attempts() -> int:
    return settings.ZEROLOCK_WEBHOOK_MAX_ATTEMPTS


def timeout_seconds() -> float:
    return settings.ZEROLOCK_WEBHOOK_TIMEOUT_SECONDS


def event_payload(event: str, approval: Approval) -> dict[str, Any]:
    """What a receiver needs to act: who asked for what, and what became of it.
    Not the values themselves (they may be large or sensitive): the console
    link and the API have them."""
    summary = (
        change_summary(approval.diff, approval.value_at_request, limit=PAYLOAD_CHANGES)
        if approval.diff is not None
        else None
    )
    return {
        "type": event,
        "timestamp": iso_time(timezone.now()),
        "data": {
            "approval_id": approval.id,
            "shard_id": approval.shard_id,
            "status": approval.effective_status,
            "status_label": status_label(approval.effective_status),
            "description": approval.description,
            "requested_by": approval.requested_by,
            "requested_key_name": approval.requested_key_name,
            "approvals_required": approval.approvals_required,
            "created_at": iso_time(approval.created_at),
            "expires_at": iso_time(approval.expires_at),
            "decided_at": iso_time(approval.decided_at),
            "decided_by": approval.decided_by,
            "reason": approval.reason,
            # Approved with edits: what was written is the approval's applied_value
            # (values stay out of payloads; the API has them).
            "edited": approval.edited,
            "edited_by": approval.edited_by,
            "previous_id": approval.previous_id or None,
            **(
                {"message": approval.reason}
                if approval.status == ApprovalStatus.CHANGES_REQUESTED
                else {}
            ),
            "commit": approval.commit,
            "console_path": f"/console/approvals/{approval.id}",
            # Absolute: a receiver (a chat message, a mail) has no base to resolve a path.
            "console_url": console_url(f"/console/approvals/{approval.id}"),
            # What the request changes, as the console's summary says it (short JSON
            # per path, from the value at request); null when the diff was left out.
            "change": None
            if summary is None
            else [
                {"op": row.op, "path": row.path, "old": row.old, "new": row.new}
                for row in summary.rows
            ],
            "change_more": summary.more if summary is not None else 0,
        },
    }


def console_url(path: str) -> str:
    return f"{settings.ZEROLOCK_PUBLIC_URL}{path}"


TEST_EVENT = "webhook.test"


def send_test(subscription: WebhookSubscription) -> str:
    """A signed ``webhook.test`` delivery to ``subscription``, sent like any other
    (admin's "Send a test event"): proves the URL, the secret and the network."""
    delivery = WebhookDelivery.objects.create(
        id=f"msg_{secrets.token_hex(12)}",
        subscription=subscription,
        event=TEST_EVENT,
        approval_id="",
        payload={
            "type": TEST_EVENT,
            "timestamp": iso_time(timezone.now()),
            "data": {"subscription": subscription.name, "console_url": console_url("/console/")},
        },
    )
    transaction.on_commit(lambda: enqueue([delivery.id]))
    return delivery.id


def redeliver(ids: list[str]) -> int:
    """Sends these deliveries again now, whatever became of them (admin's
    "Redeliver"): same id, so a receiver that keeps ids drops a duplicate. One
    that had used up its schedule gets one attempt; one still inside it carries on."""
    count = WebhookDelivery.objects.filter(pk__in=ids).update(
        status=WebhookDeliveryStatus.RETRYING, next_attempt_at=timezone.now()
    )
    transaction.on_commit(lambda: enqueue(ids))
    return count


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def emit(event: str, approval: Approval) -> list[str]:
    """Inside the transaction of the change: one delivery per subscription that
    wants ``event``; their sending is queued for after the commit."""
    subscriptions = [
        s for s in WebhookSubscription.objects.filter(active=True) if event in (s.events or [])
    ]
    if not subscriptions:
        return []
    payload = event_payload(event, approval)
    ids = []
    for subscription in subscriptions:
        delivery = WebhookDelivery.objects.create(
            id=f"msg_{secrets.token_hex(12)}",
            subscription=subscription,
            event=event,
            approval_id=approval.id,
            payload=payload,
        )
        ids.append(delivery.id)
    transaction.on_commit(lambda: enqueue(ids))
    return ids


DELIVER_TASK = "approvals.tasks.deliver_webhook"


def enqueue(ids: list[str], countdown: float = 0) -> None:
    """Hands deliveries to Celery (``common.queued``: a broker that is down leaves
    them pending for the periodic sweep, ``resend_stuck``)."""
    queue_each(DELIVER_TASK, ids, countdown=countdown, what="webhook")


def deliver(delivery_id: str) -> str:
    """One attempt (the Celery task's body); schedules the next on failure."""
    delivery = WebhookDelivery.objects.select_related("subscription").filter(pk=delivery_id).first()
    if delivery is None or delivery.status in (
        WebhookDeliveryStatus.DELIVERED,
        WebhookDeliveryStatus.FAILED,
    ):
        return "skipped"
    subscription = delivery.subscription
    # Formatted here, not when stored: the delivery keeps the standard payload
    # (admin, redelivery and tests read one truth), and a subscription switched
    # to Slack or Teams gets the new shape on its next attempt.
    sent = chat.wire_payload(subscription.format, delivery.payload)
    body = json.dumps(sent, separators=(",", ":"), sort_keys=True).encode()
    timestamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "user-agent": "ZeroLock-Webhooks/1",
        "webhook-id": delivery.id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(subscription.secret, delivery.id, timestamp, body),
    }
    number = delivery.attempts + 1
    started, clock = timezone.now(), time.monotonic()
    status_code, error = None, ""
    try:
        response = httpx.post(
            subscription.url,
            content=body,
            headers=headers,
            timeout=timeout_seconds(),
            follow_redirects=False,
        )
        status_code = response.status_code
        ok = 200 <= status_code < 300
        if not ok:
            error = f"HTTP {status_code}"
    except httpx.HTTPError as exc:
        ok, error = False, f"{type(exc).__name__}: {exc}"[:500]
    WebhookAttempt.objects.create(
        delivery=delivery,
        number=number,
        started_at=started,
        duration_ms=int((time.monotonic() - clock) * 1000),
        status_code=status_code,
        error=error,
        ok=ok,
    )
    delivery.attempts = number
    if ok:
        delivery.status, delivery.delivered_at = WebhookDeliveryStatus.DELIVERED, timezone.now()
    elif number >= max_attempts():
        delivery.status = WebhookDeliveryStatus.FAILED
    else:
        delay = retry_delay(number)
        delivery.status = WebhookDeliveryStatus.RETRYING
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=delay)
    delivery.save(update_fields=["attempts", "status", "delivered_at", "next_attempt_at"])
    if delivery.status == WebhookDeliveryStatus.RETRYING:
        enqueue([delivery.id], countdown=retry_delay(number))
    return delivery.status


def emit_expiring(now: datetime | None = None) -> int:
    """approval.expiring, once per subscription and approval, when a pending
    approval comes within the subscription's lead time of its deadline."""
    now = now or timezone.now()
    sent = 0
    for subscription in WebhookSubscription.objects.filter(active=True):
        if WebhookEvent.EXPIRING not in (subscription.events or []):
            continue
        horizon = now + timedelta(seconds=subscription.expiring_lead_seconds)
        due = Approval.objects.filter(
            status=ApprovalStatus.PENDING, expires_at__gt=now, expires_at__lte=horizon
        ).exclude(
            id__in=WebhookDelivery.objects.filter(
                subscription=subscription, event=WebhookEvent.EXPIRING
            ).values("approval_id")
        )
        for approval in due[:500]:
            try:
                with transaction.atomic():
                    delivery = WebhookDelivery.objects.create(
                        id=f"msg_{secrets.token_hex(12)}",
                        subscription=subscription,
                        event=WebhookEvent.EXPIRING,
                        approval_id=approval.id,
                        payload=event_payload(WebhookEvent.EXPIRING, approval),
                    )
            except IntegrityError:  # another sweep got there first
                continue
            enqueue([delivery.id])
            sent += 1
    return sent


def resend_stuck(now: datetime | None = None) -> int:
    """Deliveries whose queued attempt never ran (broker down, worker killed
    holding it): queue them again, a while after they were due."""
    now = now or timezone.now()
    stuck = WebhookDelivery.objects.filter(
        status__in=[WebhookDeliveryStatus.PENDING, WebhookDeliveryStatus.RETRYING],
        next_attempt_at__lte=now - timedelta(seconds=60),
    )
    ids = list(stuck.values_list("id", flat=True)[:200])
    if ids:
        WebhookDelivery.objects.filter(pk__in=ids).update(next_attempt_at=now)
        enqueue(ids)
    return len(ids)
