from celery import shared_task

from .idempotency import idempotency_prune
from .leases import leases_expire_due
from .metrics import samples_prune
from .services import delivery_prune


@shared_task
def prune_delivery_log() -> int:
    return delivery_prune()


@shared_task
def prune_metric_samples() -> int:
    return samples_prune()


@shared_task
def expire_leases() -> int:
    return leases_expire_due()


@shared_task
def prune_idempotency_records() -> int:
    return idempotency_prune()
