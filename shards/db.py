"""Write serialisation for SQLite.

SQLite allows one writer at a time. Left to itself, a waiting writer polls with
sleeps of up to 100 ms (its busy handler), so fifty threads contending for the
lock spend most of their time asleep. Queuing writers on a lock in the process
(and a file lock across processes) hands the database over without those sleeps.
PostgreSQL needs none of this: its row locks queue writers already.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

_lock = threading.RLock()
_local = threading.local()
_lock_file: dict[int, int] = {}  # pid -> fd, so a forked child opens its own


def _file_descriptor() -> int:
    pid = os.getpid()
    if pid not in _lock_file:
        path = f"{connection.settings_dict['NAME']}.writelock"
        _lock_file[pid] = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    return _lock_file[pid]


@contextmanager
def serialized_writes() -> Iterator[None]:
    if connection.vendor != "sqlite":
        yield
        return
    with _lock:
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        fd = _file_descriptor() if depth == 0 else None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            _local.depth = depth
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)


_keepers: dict[str, object] = {}


def keep_wal_open(sender: object, connection: object, **kwargs: object) -> None:
    """Holds one idle connection per SQLite file for the life of the process.

    When the last connection to a WAL database closes, SQLite checkpoints and
    deletes the WAL; under ASGI every request's thread closes its connection, so
    without this each request pays for a checkpoint."""
    if connection.vendor != "sqlite":
        return
    import sqlite3

    name = str(connection.settings_dict["NAME"])
    if name not in _keepers and "mode=memory" not in name and name != ":memory:":
        _keepers[name] = sqlite3.connect(name, check_same_thread=False)
