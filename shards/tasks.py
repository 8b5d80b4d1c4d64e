"""Thin Celery wrappers: the work lives in services."""

from celery import shared_task

from .services import delivery_prune


@shared_task
def prune_delivery_log() -> int:
    return delivery_prune()
