from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from .models import ApiKey, ApiKeyPermission
from .services import api_key_create, api_key_revoke, api_key_update


class PermissionFilter(admin.SimpleListFilter):
    title = "permission"
    parameter_name = "permission"

    def lookups(self, request, model_admin):
        return ApiKeyPermission.choices

    def queryset(self, request, queryset):
        if self.value():
            # JSON list stored as text on both databases: match the quoted name.
            return queryset.filter(permissions__icontains=f'"{self.value()}"')
        return queryset


class CommaListField(forms.CharField):
    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list) else value

    def to_python(self, value):
        return [part.strip() for part in (value or "").split(",") if part.strip()]


class ApiKeyForm(forms.ModelForm):
    permissions = forms.MultipleChoiceField(
        choices=ApiKeyPermission.choices, widget=forms.CheckboxSelectMultiple
    )
    agent_ids = CommaListField(required=False, help_text="Comma-separated; empty: any agent.")
    shard_prefixes = CommaListField(
        required=False, help_text="Comma-separated shard-id prefixes; empty: every shard."
    )

    class Meta:
        model = ApiKey
        fields = ["name", "permissions", "agent_ids", "shard_prefixes", "rate_limit", "expires_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ["name", "prefix", "revoked", "expires_at", "last_used_at", "created_at"]
    list_filter = ["revoked", PermissionFilter, "expires_at"]
    search_fields = ["name", "prefix"]
    readonly_fields = ["prefix", "revoked", "created_at", "last_used_at"]
    actions = ["revoke"]

    def has_delete_permission(self, request, obj=None):
        # Keys are revoked, never deleted: the audit log keeps naming them.
        return False

    def save_model(self, request, obj, form, change):
        actor = f"admin:{request.user.get_username()}"
        fields = {f: form.cleaned_data[f] for f in ApiKeyForm.Meta.fields}
        if change:
            changed = {f: v for f, v in fields.items() if f in form.changed_data}
            api_key_update(key=obj, changed_by=actor, **changed)
            return
        key, raw = api_key_create(created_by=actor, **fields)
        obj.__dict__.update({k: v for k, v in key.__dict__.items() if k != "_state"})
        obj._state.adding = False
        request._zerolock_raw_key = raw

    def response_add(self, request, obj, post_url_continue=None):
        # The raw key goes into this one response and nowhere else (not a message
        # cookie, not a log): it cannot be shown again.
        context = {
            **self.admin_site.each_context(request),
            "title": "API key created",
            "key": obj,
            "raw_key": request._zerolock_raw_key,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/access/apikey/created.html", context)

    @admin.action(description="Revoke selected API keys")
    def revoke(self, request, queryset):
        for key in queryset:
            api_key_revoke(key=key, revoked_by=f"admin:{request.user.get_username()}")
        self.message_user(request, f"Revoked {queryset.count()} key(s).", messages.SUCCESS)
