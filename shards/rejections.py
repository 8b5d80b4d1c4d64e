"""Audit records of commits refused as stale before they reached the write lock.

Under contention most commits are doomed: their expected version is already
gone. Taking the global write lock only to record that made every refusal as
costly as a commit, and 50 agents retrying spent the lock on refusals (the
lost-update test went from ~50 s to several minutes on PostgreSQL). Such a
refusal is now decided by a plain read, and its audit record is appended in
batches by one thread per process (every 0.2 s; flushed at exit). A hard kill
can lose the last fraction of a second of these records, never a commit.

Authentication failures (REST and WebSocket handshakes) take the same path
(``append``): each used to take the global write lock on its own, and a flood of
300 failed handshakes a second slowed honest commits four-fold."""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from .audit import audited_transaction
from .models import AuditAction

logger = logging.getLogger(__name__)
FLUSH_SECONDS = 0.2
MAX_BATCH = 1000


class RejectionRecorder:
    def __init__(self) -> None:
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self._pid: int | None = None
        self._lock = threading.Lock()

    def record(
        self, *, agent_id: str, key_prefix: str, shard_id: str, expected: int, code: str
    ) -> None:
        entry = {
            "action": AuditAction.SHARD_COMMIT_REJECTED,
            "agent_id": agent_id,
            "key_prefix": key_prefix,
            "shard_id": shard_id,
            "version_before": expected,
            "details": {"code": code},
        }
        self.append(entry)

    def append(self, entry: dict[str, Any]) -> None:
        """Any audit entry (``AuditWriter.append``'s arguments) written behind, in batches."""
        if not settings.ZEROLOCK_REJECTION_WRITE_BEHIND:
            self._write([entry])
            return
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._queue = queue.Queue()
                    threading.Thread(target=self._run, name="rejection-audit", daemon=True).start()
                    self._pid = os.getpid()
        self._queue.put(entry)

    @staticmethod
    def _write(entries: list[dict[str, Any]]) -> None:
        with audited_transaction() as audit:
            for entry in entries:
                audit.append(**entry)

    def _drain(self) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        while len(batch) < MAX_BATCH:  # a bounded transaction, however big the backlog
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _run(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            batch = self._drain()
            while batch:
                self._write_logged(batch)
                batch = self._drain() if len(batch) == MAX_BATCH else []

    def _write_logged(self, batch: list[dict[str, Any]]) -> None:
        if batch:
            try:
                close_old_connections()
                self._write(batch)
            except Exception:  # the writer must outlive a failed batch
                logger.exception("Could not audit %d write-behind entries", len(batch))

    def flush(self) -> None:
        if self._pid == os.getpid():
            batch = self._drain()
            while batch:
                self._write(batch)
                batch = self._drain()


rejections = RejectionRecorder()
atexit.register(rejections.flush)
