from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Max, Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from . import emails, policies, webhooks
from .models import (
    Approval,
    ApprovalDecision,
    ApprovalPolicy,
    ApprovalRoute,
    ApprovalStatus,
    EmailAttempt,
    EmailDelivery,
    WebhookAttempt,
    WebhookDelivery,
    WebhookDeliveryStatus,
    WebhookEvent,
    WebhookSubscription,
    status_label,
)

# Amber for "approved - not applied (stale)": nothing was written, so it must not
# read like the green of a change that happened.
STATUS_COLOURS = {
    ApprovalStatus.COMMITTED: "#1f7a4d",
    ApprovalStatus.APPROVED: "#1f7a4d",
    ApprovalStatus.APPROVED_STALE: "#7a4b00; background:#ffe8b3; padding:0 .4em",
    ApprovalStatus.REJECTED: "#a12a2a",
    ApprovalStatus.EXPIRED: "#a12a2a",
    ApprovalStatus.CHANGES_REQUESTED: "#7a4b00",
}


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
        "kind",
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

    list_display = ["id", "shard_id", "status_shown", "requested_by", "created_at", "expires_at"]
    list_filter = ["status"]
    search_fields = ["id", "shard_id", "requested_by", "description"]
    inlines = [DecisionInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Approval]:
        # Routing holds here too: staff with the view permission who are not
        # superusers see only the requests routed to their groups (or unrouted).
        return super().get_queryset(request).visible_to(request.user)

    @admin.display(description="status", ordering="status")
    def status_shown(self, approval: Approval) -> str:
        status = approval.effective_status
        return format_html(
            '<span class="approval-status" data-status="{}" style="color:{}">{}</span>',
            status,
            STATUS_COLOURS.get(status, "inherit"),
            status_label(status),
        )

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class WebhookSubscriptionForm(forms.ModelForm):
    """Events as checkboxes; the URL must be http(s)."""

    events = forms.MultipleChoiceField(
        choices=WebhookEvent.choices, widget=forms.CheckboxSelectMultiple
    )
    url = forms.URLField(max_length=500, assume_scheme="https")

    class Meta:
        model = WebhookSubscription
        fields = ["name", "url", "format", "events", "active", "expiring_lead_seconds", "secret"]

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        if not url.lower().startswith(("http://", "https://")):
            raise forms.ValidationError("Use an http:// or https:// URL.")
        return url


class AttemptInline(admin.TabularInline):
    model = WebhookAttempt
    extra = 0
    can_delete = False
    fields = readonly_fields = [
        "number",
        "started_at",
        "duration_ms",
        "status_code",
        "ok",
        "error",
    ]

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(admin.ModelAdmin):
    """The only place a webhook URL is set: admins, never API callers."""

    form = WebhookSubscriptionForm
    list_display = [
        "name",
        "url",
        "format",
        "events_shown",
        "active",
        "expiring_lead_seconds",
        "last_success",
        "retrying",
        "failed",
    ]
    list_filter = ["active", "format"]
    actions = ["send_test_event"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[WebhookSubscription]:
        # Health at a glance, one statement for the whole list: when an endpoint
        # last took a delivery, and how many are still retrying or were given up.
        return (
            super()
            .get_queryset(request)
            .annotate(
                last_delivered=Max("deliveries__delivered_at"),
                retrying_count=Count(
                    "deliveries",
                    filter=Q(deliveries__status=WebhookDeliveryStatus.RETRYING),
                ),
                failed_count=Count(
                    "deliveries", filter=Q(deliveries__status=WebhookDeliveryStatus.FAILED)
                ),
            )
        )

    @admin.display(description="last success", ordering="last_delivered")
    def last_success(self, subscription: WebhookSubscription) -> str:
        moment = getattr(subscription, "last_delivered", None)
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "never"

    @admin.display(description="retrying", ordering="retrying_count")
    def retrying(self, subscription: WebhookSubscription) -> int:
        return int(getattr(subscription, "retrying_count", 0))

    @admin.display(description="failed (gave up)", ordering="failed_count")
    def failed(self, subscription: WebhookSubscription) -> int:
        return int(getattr(subscription, "failed_count", 0))

    @admin.action(description="Send a test event to the selected subscriptions")
    def send_test_event(
        self, request: HttpRequest, queryset: QuerySet[WebhookSubscription]
    ) -> None:
        sent = [webhooks.send_test(subscription) for subscription in queryset]
        self.message_user(
            request,
            f"Queued {len(sent)} test event{'s' if len(sent) != 1 else ''} ({', '.join(sent)}); "
            "see them under Webhook deliveries.",
            messages.SUCCESS,
        )

    @admin.display(description="events")
    def events_shown(self, subscription: WebhookSubscription) -> str:
        return ", ".join(subscription.events or [])


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    """Every delivery and each of its attempts, read-only."""

    list_display = [
        "id",
        "event",
        "subscription",
        "approval_id",
        "status",
        "attempts",
        "created_at",
        "delivered_at",
    ]
    list_filter = ["status", "event", "subscription"]
    search_fields = ["id", "approval_id"]
    actions = ["redeliver"]

    @admin.action(description="Redeliver the selected deliveries now")
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = webhooks.redeliver(list(queryset.values_list("id", flat=True)))
        self.message_user(
            request,
            f"Queued {count} deliver{'ies' if count != 1 else 'y'} again.",
            messages.SUCCESS,
        )

    readonly_fields = [
        "id",
        "subscription",
        "event",
        "approval_id",
        "payload",
        "status",
        "attempts",
        "next_attempt_at",
        "created_at",
        "delivered_at",
    ]
    inlines = [AttemptInline]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class EmailAttemptInline(admin.TabularInline):
    model = EmailAttempt
    extra = 0
    can_delete = False
    fields = readonly_fields = ["number", "started_at", "duration_ms", "ok", "error"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(EmailDelivery)
class EmailDeliveryAdmin(admin.ModelAdmin):
    """Every mail to an officer and each of its attempts, read-only."""

    list_display = [
        "id",
        "event",
        "to",
        "approval_id",
        "status",
        "attempts",
        "created_at",
        "sent_at",
        "last_error",
    ]
    list_filter = ["status", "event"]
    search_fields = ["id", "approval_id", "to"]
    actions = ["send_again"]
    readonly_fields = [
        "id",
        "approval_id",
        "event",
        "user",
        "to",
        "subject",
        "body",
        "status",
        "attempts",
        "next_attempt_at",
        "created_at",
        "sent_at",
        "last_error",
    ]
    inlines = [EmailAttemptInline]

    @admin.action(description="Send the selected emails again now")
    def send_again(self, request: HttpRequest, queryset: QuerySet[EmailDelivery]) -> None:
        count = emails.send_again(list(queryset.values_list("id", flat=True)))
        self.message_user(
            request,
            f"Queued {count} email{'s' if count != 1 else ''} again.",
            messages.SUCCESS,
        )

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(admin.ModelAdmin):
    """Seen and deleted here; created through POST /api/approval-policies or the
    console, where the author, scopes and bounds are checked. Deleting goes through
    ``policies.policy_delete``, so the audit log records it."""

    list_display = ["id", "effect", "shard_prefix", "requested_by", "expires_at", "created_by"]
    list_filter = ["effect"]
    search_fields = ["id", "shard_prefix", "requested_by", "reason"]
    readonly_fields = [f.name for f in ApprovalPolicy._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: ApprovalPolicy) -> None:
        policies.policy_delete(
            policy_id=obj.pk,
            scopes=[],
            deleted_by=f"user:{request.user.get_username()}",
            key_prefix="",
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApprovalPolicy]) -> None:
        for policy in queryset:
            self.delete_model(request, policy)


@admin.register(ApprovalRoute)
class ApprovalRouteAdmin(admin.ModelAdmin):
    """Who decides which shards' requests (approvals.routing). A change applies
    to requests made after it: each request keeps the route it was made under."""

    list_display = [
        "prefix_shown",
        "approver_group",
        "escalation_shown",
        "updated_at",
    ]
    list_select_related = ["approver_group", "escalation_group"]
    search_fields = ["shard_prefix", "approver_group__name", "escalation_group__name"]
    fields = [
        "shard_prefix",
        "approver_group",
        "escalate_after_seconds",
        "escalation_group",
        "created_at",
        "updated_at",
    ]
    readonly_fields = ["created_at", "updated_at"]

    @admin.display(description="shard prefix", ordering="shard_prefix")
    def prefix_shown(self, route: ApprovalRoute) -> str:
        return route.shard_prefix or "(every other shard)"

    @admin.display(description="escalation")
    def escalation_shown(self, route: ApprovalRoute) -> str:
        if route.escalate_after_seconds is None or route.escalation_group is None:
            return "never"
        return f"to {route.escalation_group} after {route.escalate_after_seconds} s"
