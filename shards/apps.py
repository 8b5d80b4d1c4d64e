from django.apps import AppConfig


class ShardsConfig(AppConfig):
    name = "shards"
    verbose_name = "Shards, audit and API keys"

    def ready(self) -> None:
        from . import schema  # noqa: F401  registers the OpenAPI auth extension
