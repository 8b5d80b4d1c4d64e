"""The embedded Celery broker: a SQLite file through kombu's SQLAlchemy transport.

Why not kombu's ``filesystem://``: its consumer moves a message file the
producer may still be writing (the producer's lock is advisory), so the worker
read half a message, died with ``JSONDecodeError`` and took the API down with it
(issue 16; bench/broker.py counts it). Here a message is a row committed in one
transaction, and kombu takes it with ``BEGIN IMMEDIATE``, so a reader sees all
of a message or none of it and two readers never take the same one.

Kept free of Django so bench/broker.py can build the same broker."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

BROKER_FILE = "celery-broker.sqlite3"
# Writers queue on SQLite's busy handler instead of failing "database is locked".
BUSY_TIMEOUT_SECONDS = 30


def embedded_broker(data_dir: Path) -> tuple[str, dict[str, Any]]:
    """Broker URL and transport options for a SQLite broker file in ``data_dir``,
    for use with ``broker_transport`` = supervision/sqlite_transport.py."""
    path = data_dir / BROKER_FILE
    _use_wal(path)
    return f"sqlite:///{path}", {"connect_args": {"timeout": BUSY_TIMEOUT_SECONDS}}


def _use_wal(path: Path) -> None:
    # WAL is a property of the file, kept across connections: producers (beat)
    # append while the worker reads, instead of waiting for each other.
    with sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS) as db:
        db.execute("PRAGMA journal_mode=WAL")
    db.close()


def broker_prune_delivered(broker_url: str) -> int:
    """Deletes the messages the SQLite broker already handed out.

    kombu's SQLAlchemy transport never deletes a message: it marks it invisible
    when a worker takes it, and the table grows by every beat tick. An invisible
    row is never read again, so deleting it loses nothing."""
    prefix = "sqlite:///"
    if not broker_url.startswith(prefix):
        return 0
    path = broker_url[len(prefix) :]
    if not Path(path).exists():
        return 0
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS)
    try:
        with db:
            try:
                return db.execute("DELETE FROM kombu_message WHERE visible = 0").rowcount
            except sqlite3.OperationalError as exc:  # no table before the first message
                if "no such table" in str(exc):
                    return 0
                raise
    finally:
        db.close()
