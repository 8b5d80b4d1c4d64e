"""Models that lived here moved to apps of their own, keeping their tables:
API keys to ``access``, the audit log to ``audit``, metrics to ``metrics``,
leases and idempotency records to ``coordination``. Only Django's state
changes (those apps' 0001 migrations take the models over); no table is
touched. Content types follow the models, so admin history and any
permissions granted on them stay attached."""

from django.db import migrations

MOVED = {
    "apikey": "access",
    "auditentry": "audit",
    "audithead": "audit",
    "commitsample": "metrics",
    "metriccounter": "metrics",
    "socketgauge": "metrics",
    "lease": "coordination",
    "leasebinding": "coordination",
    "idempotencyrecord": "coordination",
}


def content_types_follow(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app in MOVED.items():
        if ContentType.objects.filter(app_label=app, model=model).exists():
            continue  # already made for the new app: the old one stays as it was
        ContentType.objects.filter(app_label="shards", model=model).update(app_label=app)


def content_types_return(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app in MOVED.items():
        if not ContentType.objects.filter(app_label="shards", model=model).exists():
            ContentType.objects.filter(app_label=app, model=model).update(app_label="shards")


class Migration(migrations.Migration):
    dependencies = [
        ("shards", "0008_shard_incarnation"),
        ("access", "0001_initial"),
        ("audit", "0001_initial"),
        ("metrics", "0001_initial"),
        ("coordination", "0001_initial"),
        # Its foreign key to the API key must point at access first.
        ("approvals", "0004_api_key_moved_to_access"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="leasebinding", name="lease"),
                migrations.DeleteModel(name="LeaseBinding"),
                migrations.DeleteModel(name="Lease"),
                migrations.DeleteModel(name="IdempotencyRecord"),
                migrations.DeleteModel(name="ApiKey"),
                migrations.DeleteModel(name="AuditEntry"),
                migrations.DeleteModel(name="AuditHead"),
                migrations.DeleteModel(name="CommitSample"),
                migrations.DeleteModel(name="MetricCounter"),
                migrations.DeleteModel(name="SocketGauge"),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_follow, content_types_return, elidable=True),
    ]
