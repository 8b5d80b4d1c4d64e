from django.contrib import admin

from .models import Approval, ApprovalDecision


class DecisionInline(admin.TabularInline):
    model = ApprovalDecision
    extra = 0
    can_delete = False
    fields = readonly_fields = [
        "principal",
        "decider",
        "agent_id",
        "api_key",
        "user",
        "approve",
        "counts",
        "reason",
        "created_at",
    ]

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Approval)
class ApprovalAdmin(admin.ModelAdmin):
    """Read-only: approvals are decided in the console (/console/), where the
    rules (self-approval, expiry, quorum, the commit) are applied."""

    list_display = ["id", "shard_id", "status", "requested_by", "created_at", "expires_at"]
    list_filter = ["status"]
    search_fields = ["id", "shard_id", "requested_by", "description"]
    inlines = [DecisionInline]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
