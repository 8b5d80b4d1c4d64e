"""Approval requests for irreversible changes."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from common.prefixes import prefix_q, scopes_q
from shards.models import Shard

APPROVAL_ID_REGEX = r"^apr_[0-9a-f]{24}$"


def new_approval_id() -> str:
    return f"apr_{secrets.token_hex(12)}"  # APPROVAL_ID_REGEX


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", "pending"
    # Approved and waiting to be applied: only rows from before
    # ``approved_stale`` existed, and tests that set it by hand.
    APPROVED = "approved", "approved"
    # Approved, but the commit could not apply (the shard moved on or is gone):
    # nothing was written. Its own status so that no page, list or client can
    # mistake it for a change that happened.
    APPROVED_STALE = "approved_stale", "approved \u2013 not applied (stale)"
    REJECTED = "rejected", "rejected"
    EXPIRED = "expired", "expired"
    COMMITTED = "committed", "committed"
    # Ended by a decider who asks the agent for something else (``reason`` holds
    # the message); nothing was written. The agent may ask again with previous_id.
    CHANGES_REQUESTED = "changes_requested", "changes requested"


class DecisionKind(models.TextChoices):
    """What a decision did beyond ``approve``: plain decisions leave it blank."""

    PLAIN = "", "approve or reject"
    # An approval of a value the decider edited (``Approval.edited_value``).
    EDIT = "edit", "approve with edits"
    REQUEST_CHANGES = "request_changes", "request changes"


def status_label(status: str) -> str:
    """What people read for a status string ("approved_stale" is spelled out)."""
    try:
        return ApprovalStatus(status).label
    except ValueError:
        return status


# The keyset order of every approval list: a total order (ids break ties).
NEWEST_FIRST = ("-created_at", "-id")
# What ``with_shard_now`` annotates.
SHARD_VERSION_NOW = "shard_version_now"
SHARD_CREATED_NOW = "shard_created_now"


class _Visibility:
    """Who may see which approvals is routing's rule (approvals.routing), which
    reads these models and so cannot be imported by them: the app's ``ready()``
    registers it here (``visibility_register``). Until then nobody sees any."""

    rule: Callable[[Any], models.Q] = staticmethod(lambda user: models.Q(pk__in=[]))


_visibility = _Visibility()


def visibility_register(rule: Callable[[Any], models.Q]) -> None:
    _visibility.rule = rule


class ApprovalQuerySet(models.QuerySet):
    def pending(self, now: datetime | None = None) -> ApprovalQuerySet:
        """Awaiting a decision: pending and not past the deadline (whether or not
        the expiry task has run yet)."""
        return self.filter(status=ApprovalStatus.PENDING, expires_at__gt=now or timezone.now())

    def due(self, now: datetime | None = None) -> ApprovalQuerySet:
        """Still marked pending but past the deadline: to be marked expired."""
        return self.filter(status=ApprovalStatus.PENDING, expires_at__lte=now or timezone.now())

    def with_status(self, status: str) -> ApprovalQuerySet:
        """By effective status: an overdue pending approval counts as expired."""
        if status == ApprovalStatus.PENDING:
            return self.pending()
        if status == ApprovalStatus.EXPIRED:
            return self.filter(
                models.Q(status=ApprovalStatus.EXPIRED)
                | models.Q(status=ApprovalStatus.PENDING, expires_at__lte=timezone.now())
            )
        return self.filter(status=status)

    def within_scopes(self, prefixes: list[str]) -> ApprovalQuerySet:
        """Approvals on shards a key scoped to these prefixes may see."""
        return self.filter(scopes_q("shard_id", prefixes)) if prefixes else self

    def on_shards_starting(self, prefix: str) -> ApprovalQuerySet:
        """On shards whose id starts with ``prefix`` (case-sensitively, as scopes)."""
        return self.filter(prefix_q("shard_id", prefix)) if prefix else self

    def expiring_by(self, moment: datetime) -> ApprovalQuerySet:
        return self.filter(expires_at__lte=moment)

    def newest_first(self) -> ApprovalQuerySet:
        return self.order_by(*NEWEST_FIRST)

    def oldest_first(self) -> ApprovalQuerySet:
        return self.order_by("created_at", "id")

    def expiring_first(self) -> ApprovalQuerySet:
        """What expires soonest is what needs a decision first."""
        return self.order_by("expires_at", "created_at", "id")

    def older_than(self, created_at: datetime, approval_id: str) -> ApprovalQuerySet:
        """After (``created_at``, ``approval_id``) in ``newest_first`` order: the
        keyset step of a list. Approvals that arrive meanwhile are newer, so a
        walk neither sees one twice nor skips one, as an offset would."""
        return self.filter(
            models.Q(created_at__lt=created_at)
            | models.Q(created_at=created_at, id__lt=approval_id)
        )

    def with_shard_now(self) -> ApprovalQuerySet:
        """Each approval with its shard's version and creation time as they are
        now, in the same statement (``selectors.ApprovalNow.of`` reads them;
        null when the shard is gone)."""
        shard = Shard.objects.filter(pk=models.OuterRef("shard_id"))
        return self.annotate(
            **{
                SHARD_VERSION_NOW: models.Subquery(shard.values("version")[:1]),
                SHARD_CREATED_NOW: models.Subquery(shard.values("created_at")[:1]),
            }
        )

    def with_decisions(self) -> ApprovalQuerySet:
        return self.prefetch_related(decisions_prefetch())

    def visible_to(self, user: Any) -> ApprovalQuerySet:
        """The approvals ``user`` may see in the console: the list form of
        ``approvals.routing.may_see`` (its ``visible_q``)."""
        return self.filter(_visibility.rule(user))

    def matching(
        self,
        *,
        status: str = "",
        shard_id: str = "",
        requested_by: str = "",
        decided_by: str = "",
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> ApprovalQuerySet:
        """The list and history filters; empty means any."""
        approvals = self.with_status(status) if status else self
        if shard_id:
            approvals = approvals.filter(shard_id=shard_id)
        if requested_by:
            approvals = approvals.filter(requested_by=requested_by)
        if decided_by:
            approvals = approvals.filter(decisions__decider=decided_by).distinct()
        if since:
            approvals = approvals.filter(created_at__gte=since)
        if until:
            approvals = approvals.filter(created_at__lt=until)
        return approvals


def decisions_named() -> models.QuerySet[ApprovalDecision]:
    """Decisions with the keys and users behind them (for their names), in order."""
    return ApprovalDecision.objects.select_related("api_key", "user")


def decisions_prefetch() -> models.Prefetch:
    """An approval's decisions with the keys and users behind them, in two queries."""
    return models.Prefetch("decisions", queryset=decisions_named())


def quorum_count(decisions: Iterable[ApprovalDecision]) -> int:
    """The quorum so far: approvals by distinct principals."""
    return sum(1 for d in decisions if d.approve and d.counts)


class Approval(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_approval_id)
    shard_id = models.CharField(max_length=128, db_index=True)
    status = models.CharField(
        max_length=24, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    description = models.TextField()
    requested_by = models.CharField(max_length=128, db_index=True)
    requested_key_prefix = models.CharField(max_length=16, blank=True)
    # The requesting key's name as it was at request time: a plain string, so
    # the page can say which key asked without a link to the key's table.
    requested_key_name = models.CharField(max_length=100, blank=True)
    # What the agent adds for the officer (tool name, arguments, links, ticket):
    # a JSON object, shown escaped on the detail page, never interpreted.
    metadata = models.JSONField(default=dict, blank=True)
    proposed_value = models.JSONField(null=True)
    # SHA-256 of the canonical JSON: a commit carrying this approval must match it.
    proposed_hash = models.CharField(max_length=64)
    expected_version = models.PositiveBigIntegerField()
    value_at_request = models.JSONField(null=True)
    version_at_request = models.PositiveBigIntegerField()
    approvals_required = models.PositiveSmallIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField(db_index=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=160, blank=True)
    reason = models.TextField(blank=True)
    # {"version", "audit_entry_id"} once applied, or {"error": "STALE_VERSION", ...}.
    commit = models.JSONField(null=True, blank=True)
    # The RFC 6902 patch from value_at_request to proposed_value, computed once at
    # request time under a size, depth and time cap (common/boundeddiff.py). When
    # the cap was hit, ``diff`` is null and ``diff_omitted`` says which one.
    diff = models.JSONField(null=True, blank=True)
    diff_omitted = models.CharField(max_length=16, blank=True)
    # Set when a decider approved an edited value: the value that applies then.
    # ``edited_by`` (the decider's name) tells an edit to null from no edit.
    edited_value = models.JSONField(null=True, blank=True)
    edited_by = models.CharField(max_length=160, blank=True)
    # The earlier request (same shard, same requesting key) this one follows,
    # typically after "changes requested".
    previous_id = models.CharField(max_length=40, blank=True, db_index=True)
    # Routing, resolved once at request time from the ApprovalRoute that matched
    # (approvals.routing): a route changed later moves no request already made.
    # Null approver_group: unrouted, every decider (as before routing existed).
    approver_group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    escalation_group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    escalate_at = models.DateTimeField(null=True, blank=True, db_index=True)
    escalated_at = models.DateTimeField(null=True, blank=True)

    objects = ApprovalQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        permissions = [("decide_approval", "Can approve or reject approval requests")]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at <= (now or timezone.now())

    @property
    def edited(self) -> bool:
        return bool(self.edited_by)

    @property
    def value_to_apply(self) -> Any:
        """What an approval of this request writes: the edit, if any, else the proposal."""
        return self.edited_value if self.edited else self.proposed_value

    def approvals_counted(self) -> int:
        """``quorum_count`` over ``decisions.all()``, so a prefetch serves it."""
        return quorum_count(self.decisions.all())

    @property
    def effective_status(self) -> str:
        """What the status is now, even before the expiry task has marked it."""
        if self.status == ApprovalStatus.PENDING and self.is_expired():
            return ApprovalStatus.EXPIRED
        return self.status


class ApprovalDecision(models.Model):
    """One approve or reject by a principal: an API key or a console user.

    Quorum counts principals, not the agent names a key claims: one key acting
    as dec-a, dec-b and dec-c is one vote. ``principal`` is the stable identity
    ("key:<prefix>" or "user:<id>"); ``decider`` is the name the audit log shows
    ("agent:dec-a", "user:alice")."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="decisions")
    decider = models.CharField(max_length=160)  # "user:alice" or "agent:reviewer-1"
    principal = models.CharField(max_length=200)  # "key:ab12cd34" or "user:7"
    key_prefix = models.CharField(max_length=16, blank=True)
    # The key or user behind the principal, for their names; kept null if deleted.
    api_key = models.ForeignKey(
        "access.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    agent_id = models.CharField(max_length=128, blank=True)  # the agent id the key claimed
    # False for rows from before principals were recorded in which one principal
    # decided more than once (migration 0003): only its first counted; and for
    # approvals of a value a later edit replaced (services._edit): an approval
    # counts for the value it saw, and its principal may vote again.
    counts = models.BooleanField(default=True)
    approve = models.BooleanField()
    kind = models.CharField(max_length=20, choices=DecisionKind.choices, blank=True, default="")
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "principal"],
                condition=models.Q(counts=True),
                name="one_counted_decision_per_principal",
            )
        ]

    def __str__(self) -> str:
        return f"{self.decider} {'approved' if self.approve else 'rejected'} {self.approval_id}"

    @property
    def principal_name(self) -> str:
        """The key's name or the user's username, when they still exist."""
        if self.api_key is not None:
            return self.api_key.name
        if self.user is not None:
            return self.user.get_username()
        return ""


# --- webhooks ---------------------------------------------------------------


class WebhookEvent(models.TextChoices):
    REQUESTED = "approval.requested"
    DECIDED = "approval.decided"
    EXPIRING = "approval.expiring"
    EXPIRED = "approval.expired"
    # No decision by the route's escalate_at: the escalation group may now decide.
    ESCALATED = "approval.escalated"


class WebhookFormat(models.TextChoices):
    """What the POST body looks like: our signed JSON, or a message a chat
    service's incoming webhook posts as it is (approvals.chat)."""

    STANDARD = "standard", "standard (signed JSON)"
    SLACK = "slack", "Slack incoming webhook"
    TEAMS = "teams", "Teams incoming webhook (Adaptive Card)"


def new_webhook_secret() -> str:
    """Standard Webhooks style: "whsec_" and the base64 of 32 random bytes."""
    import base64

    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class WebhookSubscription(models.Model):
    """An endpoint told about approval events. Made and changed only by admins
    in Django admin: no API sets a webhook URL, so an agent key cannot point the
    server at an address of its choosing."""

    name = models.CharField(max_length=100)
    url = models.URLField(max_length=500, help_text="http:// or https:// endpoint to POST to.")
    events = models.JSONField(default=list, help_text="Event names this endpoint receives.")
    secret = models.CharField(
        max_length=100,
        default=new_webhook_secret,
        help_text="Signs every delivery (HMAC-SHA256, Standard Webhooks style). "
        "Give it to the receiver; keep it out of logs.",
    )
    active = models.BooleanField(default=True)
    expiring_lead_seconds = models.PositiveIntegerField(
        default=300, help_text="How long before expiry approval.expiring is sent."
    )
    format = models.CharField(
        max_length=16,
        choices=WebhookFormat.choices,
        default=WebhookFormat.STANDARD,
        help_text="Standard: the signed JSON event. Slack or Teams: a chat message for an "
        "incoming-webhook URL, linking to the request in the console.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    RETRYING = "retrying"
    FAILED = "failed"  # gave up after the last attempt


class WebhookDelivery(models.Model):
    """One event for one subscription; its attempts are recorded below."""

    id = models.CharField(primary_key=True, max_length=40)  # "msg_...": the webhook-id header
    subscription = models.ForeignKey(
        WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.CharField(max_length=32, choices=WebhookEvent.choices)
    approval_id = models.CharField(max_length=40, db_index=True)
    payload = models.JSONField()
    status = models.CharField(
        max_length=16,
        choices=WebhookDeliveryStatus.choices,
        default=WebhookDeliveryStatus.PENDING,
        db_index=True,
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now, db_index=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            # approval.expiring is sent once per subscription and approval.
            models.UniqueConstraint(
                fields=["subscription", "event", "approval_id"],
                condition=models.Q(event="approval.expiring"),
                name="one_expiring_webhook_per_approval",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} -> {self.subscription} ({self.status})"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    ok = models.BooleanField(default=False)

    class Meta:
        ordering = ["number", "id"]

    def __str__(self) -> str:
        return f"attempt {self.number}: {self.status_code or self.error}"


# --- email to risk officers ---------------------------------------------------


class EmailEvent(models.TextChoices):
    REQUESTED = "approval.requested"
    EXPIRING = "approval.expiring"  # the reminder, ZEROLOCK_APPROVAL_REMINDER_SECONDS ahead
    ESCALATED = "approval.escalated"


class EmailDeliveryStatus(models.TextChoices):
    PENDING = "pending"
    RETRYING = "retrying"
    SENT = "sent"  # the mail server took it
    FAILED = "failed"  # gave up after the last attempt


class EmailDelivery(models.Model):
    """One mail about one approval to one address, written in the change's
    transaction with its text already made; the worker sends it (approvals/emails.py)."""

    id = models.CharField(primary_key=True, max_length=40)  # "eml_<hex>"
    approval_id = models.CharField(max_length=40, db_index=True)
    event = models.CharField(max_length=32, choices=EmailEvent.choices)
    # Null once the user is deleted: the record of what was sent stays.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="approval_emails",
    )
    to = models.EmailField(max_length=254)
    subject = models.CharField(max_length=200)
    body = models.TextField()
    status = models.CharField(
        max_length=16,
        choices=EmailDeliveryStatus.choices,
        default=EmailDeliveryStatus.PENDING,
        db_index=True,
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now, db_index=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "email deliveries"
        constraints = [
            # The reminder goes once per approval and address, however many sweeps run.
            models.UniqueConstraint(
                fields=["approval_id", "event", "to"],
                condition=models.Q(event="approval.expiring"),
                name="one_reminder_email_per_approval_and_address",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} -> {self.to} ({self.status})"


class EmailAttempt(models.Model):
    delivery = models.ForeignKey(EmailDelivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=500, blank=True)
    ok = models.BooleanField(default=False)

    class Meta:
        ordering = ["number", "id"]

    def __str__(self) -> str:
        return f"attempt {self.number}: {'sent' if self.ok else self.error}"


# --- standing approval policies ------------------------------------------------

POLICY_ID_REGEX = r"^pol_[0-9a-f]{24}$"


def new_policy_id() -> str:
    return f"pol_{secrets.token_hex(12)}"  # POLICY_ID_REGEX


class PolicyEffect(models.TextChoices):
    APPROVE = "approve", "approve"
    REJECT = "reject", "reject"


class ApprovalPolicyQuerySet(models.QuerySet):
    def live(self, now: datetime | None = None) -> ApprovalPolicyQuerySet:
        """Not yet expired: a policy never decides after ``expires_at``, whether
        or not anything has cleaned it up."""
        return self.filter(expires_at__gt=now or timezone.now())

    def within_scopes(self, prefixes: list[str]) -> ApprovalPolicyQuerySet:
        """Policies whose whole reach a key scoped to ``prefixes`` covers: their
        shard prefix starts with one of the key's (no scopes: every policy)."""
        return self.filter(scopes_q("shard_prefix", prefixes)) if prefixes else self


class ApprovalPolicy(models.Model):
    """A standing decision: a new approval request that matches it (shard prefix,
    requester, key, and every ``when`` compare on the proposed value) is decided
    by it at once, as one principal ("policy:<id>"). The safety rules live in
    approvals.policies."""

    id = models.CharField(primary_key=True, max_length=40, default=new_policy_id, editable=False)
    shard_prefix = models.CharField(max_length=128, blank=True)
    requested_by = models.CharField(max_length=128, blank=True)  # an agent id; blank: any
    key_prefix = models.CharField(max_length=16, blank=True)  # the requester's key; blank: any
    # [{"path": [...], "op": "<", "value": 100}, ...]: the /api/txn compare operators.
    when = models.JSONField(default=list, blank=True)
    effect = models.CharField(max_length=8, choices=PolicyEffect.choices)
    reason = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)
    # The author, for the self-approval rule: a policy never decides a request made
    # through its author's key, or by a key belonging to its author's user.
    created_by = models.CharField(max_length=160)  # "user:alice" or "agent:ops-1"
    author_key_prefix = models.CharField(max_length=16, blank=True)
    author_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    objects = ApprovalPolicyQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name_plural = "approval policies"

    def __str__(self) -> str:
        return f"{self.id} ({self.effect} {self.shard_prefix or '*'})"

    @property
    def principal(self) -> str:
        return f"policy:{self.id}"


# --- routing --------------------------------------------------------------------


class ApprovalRoute(models.Model):
    """Who decides requests on shards whose id starts with ``shard_prefix``
    (case-sensitively, like key scopes; "" is the catch-all). The longest
    matching prefix wins (approvals.routing.route_for). Made in Django admin."""

    shard_prefix = models.CharField(
        max_length=128,
        unique=True,
        blank=True,
        help_text="Shards whose id starts with this (case-sensitive). Empty: every shard "
        "no other route matches.",
    )
    approver_group = models.ForeignKey(
        "auth.Group",
        on_delete=models.PROTECT,
        related_name="approval_routes",
        help_text="Only its members who may decide approvals see and decide these requests.",
    )
    escalate_after_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Without a decision after this long, the escalation group may decide too. "
        "Empty: never.",
    )
    escalation_group = models.ForeignKey(
        "auth.Group",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="approval_escalations",
        help_text="Required with escalate_after_seconds.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["shard_prefix"]

    def __str__(self) -> str:
        return f"{self.shard_prefix or '*'} -> {self.approver_group}"

    def clean(self) -> None:
        if self.escalate_after_seconds is not None and self.escalation_group_id is None:
            raise ValidationError(
                {"escalation_group": "An escalation needs a group to escalate to."}
            )
        if self.escalate_after_seconds == 0:
            raise ValidationError({"escalate_after_seconds": "At least one second (empty: never)."})
