from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("coordination", "0002_agent_sessions"),
    ]

    operations = [
        migrations.AddField(
            model_name="lease",
            name="session",
            # A database default too: rows written by code that predates the column
            # (an older process during a rolling upgrade, the layout-move tests) get False.
            field=models.BooleanField(default=False, db_default=False),
        ),
    ]
