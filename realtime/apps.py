from django.apps import AppConfig


class RealtimeConfig(AppConfig):
    name = "realtime"
    verbose_name = "WebSockets and pushes"

    def ready(self) -> None:
        # Domain events (shard changed, approval decided...) become pushes here.
        from .push import sinks_register

        sinks_register()
