from django.apps import AppConfig


class ShardsConfig(AppConfig):
    name = "shards"
    verbose_name = "Shards, audit and API keys"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from . import schema  # noqa: F401  registers the OpenAPI auth extension
        from .db import keep_wal_open

        connection_created.connect(keep_wal_open, dispatch_uid="zerolock-keep-wal-open")
