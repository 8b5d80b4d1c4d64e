from celery import shared_task

from .metrics import samples_prune
from .services import delivery_prune


@shared_task
def prune_delivery_log() -> int:
    return delivery_prune()


@shared_task
def prune_metric_samples() -> int:
    return samples_prune()
