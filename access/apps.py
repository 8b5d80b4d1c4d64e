from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    verbose_name = "API keys and access"

    def ready(self) -> None:
        from axes.signals import user_locked_out
        from django.db.models.signals import post_delete, post_save

        from . import schema  # noqa: F401  registers the OpenAPI auth extension
        from .keys import key_cache
        from .logins import audit_lockout
        from .models import ApiKey

        def forget(sender: type, instance: ApiKey, **_: object) -> None:
            key_cache.forget(instance.prefix)

        # A key saved or deleted in this process is looked up afresh at once.
        post_save.connect(forget, sender=ApiKey, weak=False, dispatch_uid="apikey-cache")
        post_delete.connect(forget, sender=ApiKey, weak=False, dispatch_uid="apikey-cache-del")
        user_locked_out.connect(audit_lockout, weak=False, dispatch_uid="login-lockout-audit")
