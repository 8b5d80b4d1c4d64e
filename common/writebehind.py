"""Write-behind: items queued by any thread, written in batches by one thread
per process, so the request that made them never waits for the write.

Used for what may lag a fraction of a second behind the truth: delivery
records, refused-commit and failed-auth audit records, metrics. A clean exit
flushes (``atexit``); a hard kill can lose the last period's items, never a
commit. A forked child starts its own thread and queue.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.db import close_old_connections

from common.applied import applied_marking

logger = logging.getLogger(__name__)
T = TypeVar("T")


class WriteBehind(Generic[T]):
    """``put`` queues an item; every ``period`` seconds the thread hands what is
    queued (at most ``max_batch`` at a time) to ``write``. With ``enabled()``
    false (tests), ``put`` writes at once, in the caller's thread. With
    ``tick``, ``write`` is called every period even with nothing queued (for
    state refreshed on a clock, like the socket gauges)."""

    def __init__(
        self,
        name: str,
        write: Callable[[list[T]], Any],
        *,
        period: float,
        max_batch: int = 1000,
        enabled: Callable[[], bool] = lambda: True,
        tick: bool = False,
    ) -> None:
        self.name = name
        self._write = write  # what it returns is ignored
        self.period = period
        self.max_batch = max_batch
        self._enabled = enabled
        self._tick = tick
        self._queue: queue.Queue[T] = queue.Queue()
        self._pid: int | None = None
        self._start_lock = threading.Lock()
        self._write_lock = threading.Lock()  # the thread and flush() never write at once
        atexit.register(self.flush)

    def put(self, item: T) -> None:
        if not self._enabled():
            # Written for the queue, not as the caller's own write: it must not
            # mark the caller's Idempotency-Key applied (common.applied).
            with applied_marking(None):
                self._write([item])
            return
        self.ensure_running()
        self._queue.put(item)

    def ensure_running(self) -> None:
        if self._pid == os.getpid():
            return
        with self._start_lock:
            if self._pid != os.getpid():
                self._queue = queue.Queue()  # a forked child starts with its own
                threading.Thread(target=self._run, name=self.name, daemon=True).start()
                self._pid = os.getpid()

    def flush(self) -> None:
        """Writes everything queued, in the caller's thread (exit, tests)."""
        if self._pid != os.getpid():
            return
        with self._write_lock, applied_marking(None):
            batch = self._drain()
            while batch:
                self._write(batch)
                batch = self._drain()
            if self._tick:
                self._write([])

    def _drain(self) -> list[T]:
        batch: list[T] = []
        while len(batch) < self.max_batch:  # a bounded transaction, however big the backlog
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _run(self) -> None:
        while True:
            time.sleep(self.period)
            try:
                close_old_connections()
                with self._write_lock:
                    batch = self._drain()
                    if batch or self._tick:
                        self._write(batch)
                    while len(batch) == self.max_batch:
                        batch = self._drain()
                        if batch:
                            self._write(batch)
            except Exception:  # the writer thread must outlive any failed write
                logger.exception("%s: a write-behind batch failed", self.name)
