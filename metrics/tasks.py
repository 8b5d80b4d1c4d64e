"""Thin Celery wrappers: the work lives in ``record``."""

from celery import shared_task

from .record import samples_prune


@shared_task
def prune_metric_samples() -> int:
    return samples_prune()
