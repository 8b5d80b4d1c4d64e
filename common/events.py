"""Events leave after commit, from one helper.

Domain code says what happened (``send_event_on_commit("shard_changed", ...)``);
it does not know who listens. The layers above register sinks in their
``AppConfig.ready()`` (the realtime app turns events into WebSocket pushes).
An event is sent only if its transaction commits; outside a transaction it is
sent at once. With no sink registered an event goes nowhere: pushes are
fire-and-forget by contract, nothing a client was told depends on one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)

Sink = Callable[..., None]
_sinks: dict[str, list[Sink]] = {}

# The events the domain sends, and what each carries.
EVENTS = {
    "shard_changed": ("shard_id", "version", "committed_by"),
    "shard_deleted": ("shard_id", "deleted_by"),
    "crdt_update": ("shard_id", "update", "origin"),
    "conflict": ("key_prefix", "agent_id", "shard_id", "version", "winning", "rejected"),
    "approval_changed": ("approval", "event"),
    "reservation_changed": ("reservation", "event"),
}


def event_sink(kind: str, sink: Sink) -> None:
    """Registers ``sink(**payload)`` for ``kind`` (idempotent per sink)."""
    if kind not in EVENTS:
        raise ValueError(f"unknown event {kind!r}")
    sinks = _sinks.setdefault(kind, [])
    if sink not in sinks:
        sinks.append(sink)


def send_event_on_commit(kind: str, **payload: Any) -> None:
    """Delivers the event to its sinks once the current transaction commits."""
    if kind not in EVENTS:
        raise ValueError(f"unknown event {kind!r}")
    transaction.on_commit(lambda: send_event_now(kind, **payload))


def send_event_now(kind: str, **payload: Any) -> None:
    for sink in _sinks.get(kind, ()):
        try:
            sink(**payload)
        except Exception:  # one failed listener must not stop the others, or the caller
            logger.exception("event sink for %s failed", kind)
