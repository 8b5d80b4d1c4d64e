"""Handing work to the Celery worker by task name, for the deliveries (webhooks,
email): the domain never imports its Celery wrappers (tasks.py), and a broker
that is down must never turn the change that caused a delivery into an error.
The delivery row stays pending, and its periodic sweep queues it again."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import current_app

logger = logging.getLogger(__name__)


def queue_each(task: str, ids: Iterable[str], *, countdown: float = 0, what: str) -> None:
    """``task(id)`` for each id, ``countdown`` seconds from now; a failure to
    queue is logged (``what`` names the delivery kind), never raised."""
    for one in ids:
        try:
            current_app.send_task(task, args=(one,), countdown=countdown)
        except Exception:
            logger.exception("%s %s could not be queued; the sweep will retry", what, one)
