"""Takes over models that used to live in the shards app, on their old tables."""


import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    # The tables were made by shards' migrations (this app's models lived there);
    # this app only takes them over in Django's state, touching no table.
    dependencies = [
        ("shards", "0008_shard_incarnation"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='ApiKey',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=100)),
                    ('prefix', models.CharField(max_length=16, unique=True)),
                    ('hashed_key', models.CharField(max_length=64)),
                    ('permissions', models.JSONField(default=list)),
                    ('agent_ids', models.JSONField(blank=True, default=list)),
                    ('shard_prefixes', models.JSONField(blank=True, default=list)),
                    ('rate_limit', models.PositiveIntegerField(blank=True, null=True)),
                    ('expires_at', models.DateTimeField(blank=True, null=True)),
                    ('revoked', models.BooleanField(default=False)),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('last_used_at', models.DateTimeField(blank=True, null=True)),
                ],
                options={
                    'verbose_name': 'API key',
                    'db_table': 'shards_apikey',
                },
            ),
            ],
            database_operations=[],
        ),
    ]
