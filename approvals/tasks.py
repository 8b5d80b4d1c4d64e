from celery import shared_task

from . import webhooks
from .services import approval_escalate_due, approval_expire_due


@shared_task
def expire_approvals() -> int:
    """Beat runs this every 2 s: overdue approvals expire, undecided routed ones
    escalate, and the webhook sweeps ride along (approval.expiring, deliveries
    whose attempt never ran)."""
    expired = approval_expire_due(by="worker")
    approval_escalate_due()
    webhooks.emit_expiring()
    webhooks.resend_stuck()
    return expired


@shared_task
def deliver_webhook(delivery_id: str) -> str:
    """Thin: one attempt, recorded; webhooks.deliver schedules the next."""
    return webhooks.deliver(delivery_id)
