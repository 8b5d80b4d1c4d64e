"""``approved_stale``: approved, but the commit could not apply.

Before this, such an approval kept the status ``approved`` with
``commit.error`` set, and every page showed it green, as if the change had
happened. Existing rows of that kind move to the new status; an ``approved``
row without a commit error (none are made any more) keeps its status."""

from django.db import migrations, models


def forwards(apps, schema_editor) -> None:
    Approval = apps.get_model("approvals", "Approval")
    for approval in Approval.objects.filter(status="approved").only("id", "commit"):
        if isinstance(approval.commit, dict) and approval.commit.get("error"):
            Approval.objects.filter(pk=approval.pk).update(status="approved_stale")


def backwards(apps, schema_editor) -> None:
    apps.get_model("approvals", "Approval").objects.filter(status="approved_stale").update(
        status="approved"
    )


class Migration(migrations.Migration):
    dependencies = [("approvals", "0004_api_key_moved_to_access")]

    operations = [
        migrations.AlterField(
            model_name="approval",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "pending"),
                    ("approved", "approved"),
                    ("approved_stale", "approved – not applied (stale)"),
                    ("rejected", "rejected"),
                    ("expired", "expired"),
                    ("committed", "committed"),
                ],
                default="pending",
                max_length=16,
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
