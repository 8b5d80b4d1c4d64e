from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    verbose_name = "API keys and access"

    def ready(self) -> None:
        from . import schema  # noqa: F401  registers the OpenAPI auth extension
