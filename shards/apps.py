from django.apps import AppConfig


class ShardsConfig(AppConfig):
    name = "shards"
    verbose_name = "Shards"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from common.db import keep_wal_open

        connection_created.connect(keep_wal_open, dispatch_uid="zerolock-keep-wal-open")
