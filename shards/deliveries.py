"""The delivery log's write path.

A read must not wait for a write: in a server process, deliveries are queued and
a background thread inserts them in batches (one short write transaction per
batch instead of one per read). ``flush()`` waits for the queue to drain and runs
at exit, so a clean shutdown loses nothing; a hard kill can lose the last
fraction of a second of read records (never a commit or an audit entry).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from datetime import datetime

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from .models import Delivery

logger = logging.getLogger(__name__)
BATCH = 500


class DeliveryRecorder:
    def __init__(self) -> None:
        self._queue: queue.Queue[Delivery] = queue.Queue()
        self._pid: int | None = None
        self._start_lock = threading.Lock()

    def record(
        self, *, agent_id: str, shard_id: str, version: int, at: datetime | None = None
    ) -> None:
        row = Delivery(
            agent_id=agent_id, shard_id=shard_id, version=version, read_at=at or timezone.now()
        )
        if not settings.ZEROLOCK_DELIVERY_WRITE_BEHIND:
            row.save(force_insert=True)
            return
        self._ensure_thread()
        self._queue.put(row)

    def flush(self) -> None:
        if self._pid == os.getpid():
            self._queue.join()

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid():
            return
        with self._start_lock:
            if self._pid != os.getpid():
                self._queue = queue.Queue()  # a forked child starts with its own
                threading.Thread(target=self._run, name="delivery-writer", daemon=True).start()
                self._pid = os.getpid()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                close_old_connections()
                Delivery.objects.bulk_create(batch)
            except Exception:  # the writer thread must survive a bad batch
                logger.exception("Could not write %d delivery records", len(batch))
            finally:
                for _ in batch:
                    self._queue.task_done()


recorder = DeliveryRecorder()
atexit.register(recorder.flush)
