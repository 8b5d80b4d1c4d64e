from celery import current_app, shared_task

from supervision.broker import broker_prune_delivered


@shared_task
def prune_broker_messages() -> int:
    """Deletes messages the embedded broker already delivered (no-op on Redis)."""
    return broker_prune_delivered(current_app.conf.broker_url)
