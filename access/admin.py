from django import forms
from django.contrib import admin, messages
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

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
        fields = [
            "name",
            "permissions",
            "agent_ids",
            "shard_prefixes",
            "rate_limit",
            "expires_at",
            "user",
        ]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ["name", "prefix", "state", "expires_at", "last_used_at", "created_at"]
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

    @admin.display(description="state", ordering="revoked")
    def state(self, obj) -> str:
        # Words, not a boolean icon: a green tick on "revoked" read as "fine".
        if obj.revoked:
            return format_html('<span style="color:#a12a2a;font-weight:600">{}</span>', "revoked")
        return format_html('<span style="color:#1f7a4d">{}</span>', "active")

    def response_add(self, request, obj, post_url_continue=None):
        # POST-redirect-GET: the raw key waits in the server-side session for the
        # one GET that shows it (never a message cookie, never a log), so a
        # reload neither creates a second key nor shows this one again.
        request.session[f"zerolock-new-key:{obj.pk}"] = request._zerolock_raw_key
        return HttpResponseRedirect(reverse("admin:access_apikey_created", args=[obj.pk]))

    def get_urls(self):
        created = path(
            "<path:object_id>/created/",
            self.admin_site.admin_view(self.created_view),
            name="access_apikey_created",
        )
        return [created, *super().get_urls()]

    def created_view(self, request, object_id):
        key = self.get_object(request, object_id)
        if key is None or not self.has_view_or_change_permission(request, key):
            raise Http404("No such API key.")
        context = {
            **self.admin_site.each_context(request),
            "title": "API key created",
            "key": key,
            "raw_key": request.session.pop(f"zerolock-new-key:{key.pk}", None),
            "opts": self.model._meta,
        }
        response = TemplateResponse(request, "admin/access/apikey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected API keys")
    def revoke(self, request, queryset):
        for key in queryset:
            api_key_revoke(key=key, revoked_by=f"admin:{request.user.get_username()}")
        self.message_user(request, f"Revoked {queryset.count()} key(s).", messages.SUCCESS)
