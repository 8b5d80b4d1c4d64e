"""The delivery log's write path.

A read must not wait for a write: in a server process, deliveries are queued and
a background thread inserts them in batches (one short write transaction per
batch instead of one per read). ``flush()`` waits for the queue to drain and runs
at exit, so a clean shutdown loses nothing; a hard kill can lose the last
fraction of a second of read records (never a commit or an audit entry).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common import hotsql
from common.db import sqlite_writer_queue
from common.writebehind import WriteBehind

from .models import Delivery


def _insert(batch: list[dict[str, Any]]) -> None:
    # A compiled INSERT run once per batch: bulk_create built a model instance
    # per read and compiled its query per batch (3 % of a GET's CPU under load).
    with sqlite_writer_queue(), transaction.atomic():
        hotsql.insert_many(Delivery, batch)


class DeliveryRecorder:
    def __init__(self) -> None:
        self._writer: WriteBehind[dict[str, Any]] = WriteBehind(
            "delivery-writer",
            _insert,
            period=0.1,
            max_batch=500,
            enabled=lambda: settings.ZEROLOCK_DELIVERY_WRITE_BEHIND,
        )

    def record(
        self, *, agent_id: str, shard_id: str, version: int, at: datetime | None = None
    ) -> None:
        self._writer.put(
            {
                "agent_id": agent_id,
                "shard_id": shard_id,
                "version": version,
                "read_at": at or timezone.now(),
            }
        )

    def flush(self) -> None:
        self._writer.flush()


recorder = DeliveryRecorder()
