import json

from django.contrib import admin
from django.utils.html import format_html

from .models import ApiKey, AuditEntry, Shard


@admin.register(Shard)
class ShardAdmin(admin.ModelAdmin):
    list_display = ["id", "type", "crdt_type", "version", "reversible", "updated_by", "updated_at"]
    list_filter = ["type", "reversible", "owner_policy"]
    search_fields = ["id"]
    readonly_fields = [
        "version",
        "pretty_value",
        "created_by",
        "created_at",
        "updated_by",
        "updated_at",
    ]
    exclude = ["value"]

    @admin.display(description="value")
    def pretty_value(self, obj: Shard) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.value, indent=2, ensure_ascii=False))


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["id", "created_at", "action", "agent_id", "shard_id", "version_after"]
    list_filter = ["action"]
    search_fields = ["shard_id", "agent_id"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "revoked", "expires_at", "last_used_at"]
    list_filter = ["revoked"]
    readonly_fields = ["prefix", "hashed_key", "created_at", "last_used_at"]

    def has_add_permission(self, request):
        # Until keys can be issued here, `manage.py createapikey` shows the raw key once.
        return False
