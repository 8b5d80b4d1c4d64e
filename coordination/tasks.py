"""Thin Celery wrappers: correctness never waits for them (expiry also runs at
the start of every write), they only keep the tables small and prompt."""

from celery import shared_task

from .idempotency import idempotency_prune
from .leases import leases_expire_now
from .reservations import reservations_expire_now


@shared_task
def expire_leases() -> int:
    return leases_expire_now()


@shared_task
def expire_reservations() -> int:
    return reservations_expire_now()


@shared_task
def prune_idempotency_records() -> int:
    return idempotency_prune()
