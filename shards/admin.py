import json

from django.contrib import admin
from django.utils.html import format_html

from .models import Shard


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

    # Shards change only through the API, where every write is checked and audited.
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="value")
    def pretty_value(self, obj: Shard) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.value, indent=2, ensure_ascii=False))
