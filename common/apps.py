from django.apps import AppConfig


class CommonConfig(AppConfig):
    """The layer under every app: here so that what the database layer needs on
    every path that opens a connection (the server, the worker, beat, each
    management command, the tests) is wired where that layer lives, not in
    whichever app happened to load first."""

    name = "common"
    verbose_name = "Common"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from common.db import keep_wal_open

        # WAL and busy_timeout are set per connection (settings.DATABASES'
        # init_command); this keeps the WAL file from being checkpointed away
        # each time a request's thread closes the last connection.
        connection_created.connect(keep_wal_open, dispatch_uid="zerolock-keep-wal-open")
