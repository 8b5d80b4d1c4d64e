"""The API key model moved from the shards app to the access app, on the same
table: only Django's state changes, the foreign key in the database stays."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0001_initial"),
        ("approvals", "0003_decision_principals_and_stored_diff"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="approvaldecision",
                    name="api_key",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="access.apikey",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
