"""SQLite connection care."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection

_keepers: dict[str, object] = {}


def keep_wal_open(sender: object, connection: Any, **kwargs: object) -> None:
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


# Reentrant: after-commit hooks run while the committing thread still holds it,
# and one of them (a metrics flush, inline in tests) may write again.
_writer = threading.RLock()


@contextmanager
def sqlite_writer_queue() -> Iterator[None]:
    """SQLite has one writer; a writer that finds it busy sleeps in SQLite's busy
    handler (up to 100 ms a nap). Threads of one process queue here instead:
    measured, 80 appenders spent half their server time in those naps."""
    if connection.vendor != "sqlite":
        yield
        return
    with _writer:
        yield
