from celery import shared_task

from . import emails, webhooks
from .services import approval_escalate_due, approval_expire_due


@shared_task
def expire_approvals() -> int:
    """Beat runs this every 2 s: overdue approvals expire, undecided routed ones
    escalate, and the webhook and email sweeps ride along (approval.expiring,
    the reminder mail, deliveries
    whose attempt never ran)."""
    expired = approval_expire_due(by="worker")
    approval_escalate_due()
    webhooks.emit_expiring()
    webhooks.resend_stuck()
    emails.remind_expiring()
    emails.resend_stuck()
    return expired


@shared_task
def deliver_webhook(delivery_id: str) -> str:
    """Thin: one attempt, recorded; webhooks.deliver schedules the next."""
    return webhooks.deliver(delivery_id)


@shared_task
def deliver_email(delivery_id: str) -> str:
    """Thin: one attempt, recorded; emails.deliver schedules the next."""
    return emails.deliver(delivery_id)
