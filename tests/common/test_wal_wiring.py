"""SQLite's WAL care is wired by the database layer's own AppConfig
(common.apps), on every path that sets Django up, not by the shards app."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.backends.signals import connection_created

from common import db


def test_every_new_connection_is_handed_to_keep_wal_open():
    # Each receiver is (lookup key, weak reference, ...); the key starts with
    # the dispatch_uid it was connected with.
    wired = {entry[0][0]: entry[1]() for entry in connection_created.receivers}
    assert wired["zerolock-keep-wal-open"] is db.keep_wal_open


@pytest.mark.django_db
def test_the_sqlite_file_keeps_one_connection_open():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    connection.ensure_connection()
    name = str(connection.settings_dict["NAME"])
    if "mode=memory" in name or name == ":memory:":
        pytest.skip("an in-memory database has no WAL file")
    assert name in db._keepers
