"""Quorum by principal, and the diff stored once.

Decisions gain the principal that made them ("key:<prefix>" for an API key,
"user:<id>" for a console user), the key or user behind it, the agent id the key
claimed, and whether the decision counts. Before this, quorum counted agent
names: one key approving as dec-a, dec-b and dec-c counted three times. The
backfill keeps such rows (they are history) but marks every decision after a
principal's first on the same approval ``counts = False``.

Approvals gain the stored diff, backfilled under the same caps as new requests.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from common.boundeddiff import DiffLimits, bounded_diff


def principal_of(decision, users_by_name: dict) -> tuple[str, int | None]:
    if decision.key_prefix:
        return f"key:{decision.key_prefix}", None
    if decision.decider.startswith("user:"):
        name = decision.decider.removeprefix("user:")
        user_id = users_by_name.get(name)
        # A user deleted since keeps a principal of their own, by name.
        return (f"user:{user_id}", user_id) if user_id else (f"username:{name}", None)
    return decision.decider, None


def backfill_decisions(apps, schema_editor) -> None:
    Decision = apps.get_model("approvals", "ApprovalDecision")
    ApiKey = apps.get_model("shards", "ApiKey")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    names = {
        d.removeprefix("user:")
        for d in Decision.objects.filter(decider__startswith="user:").values_list(
            "decider", flat=True
        )
    }
    users_by_name = dict(User.objects.filter(username__in=names).values_list("username", "pk"))
    keys = dict(ApiKey.objects.values_list("prefix", "pk"))
    seen: set[tuple[str, str]] = set()
    for decision in (
        Decision.objects.select_related("approval").order_by("created_at", "id").iterator()
    ):
        principal, user_id = principal_of(decision, users_by_name)
        decision.principal = principal
        decision.user_id = user_id
        decision.api_key_id = keys.get(decision.key_prefix) if decision.key_prefix else None
        decision.agent_id = (
            decision.decider.removeprefix("agent:") if decision.decider.startswith("agent:") else ""
        )
        requester = decision.approval.requested_key_prefix
        own_key = bool(requester) and decision.key_prefix == requester
        decision.counts = (decision.approval_id, principal) not in seen and not own_key
        seen.add((decision.approval_id, principal))
        decision.save(update_fields=["principal", "user", "api_key", "agent_id", "counts"])


def backfill_diffs(apps, schema_editor) -> None:
    Approval = apps.get_model("approvals", "Approval")
    limits = DiffLimits(
        max_bytes=settings.ZEROLOCK_APPROVAL_DIFF_MAX_BYTES,
        max_depth=settings.ZEROLOCK_APPROVAL_MAX_DEPTH,
        max_seconds=settings.ZEROLOCK_APPROVAL_DIFF_MAX_MS / 1000,
    )
    for approval in Approval.objects.only("id", "value_at_request", "proposed_value").iterator():
        diff = bounded_diff(approval.value_at_request, approval.proposed_value, limits)
        Approval.objects.filter(pk=approval.pk).update(diff=diff.patch, diff_omitted=diff.omitted)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0002_risk_officer_and_viewer_groups"),
        ("shards", "0007_txn_leases_idempotency"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="approvaldecision",
            name="one_decision_per_decider",
        ),
        migrations.AddField(
            model_name="approvaldecision",
            name="principal",
            field=models.CharField(default="", max_length=200),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="approvaldecision",
            name="api_key",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="shards.apikey",
            ),
        ),
        migrations.AddField(
            model_name="approvaldecision",
            name="user",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="approvaldecision",
            name="agent_id",
            field=models.CharField(blank=True, max_length=128),
        ),
        migrations.AddField(
            model_name="approvaldecision",
            name="counts",
            field=models.BooleanField(default=True),
        ),
        migrations.AddField(
            model_name="approval",
            name="diff",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="approval",
            name="diff_omitted",
            field=models.CharField(blank=True, max_length=16),
        ),
        migrations.RunPython(backfill_decisions, migrations.RunPython.noop),
        migrations.RunPython(backfill_diffs, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="approvaldecision",
            constraint=models.UniqueConstraint(
                condition=models.Q(("counts", True)),
                fields=("approval", "principal"),
                name="one_counted_decision_per_principal",
            ),
        ),
    ]
