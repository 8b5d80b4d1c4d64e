from celery import shared_task

from .services import approval_expire_due


@shared_task
def expire_approvals() -> int:
    return approval_expire_due(by="worker")
