"""Takes over models that used to live in the shards app, on their old tables."""


import coordination.models
import django.db.models.deletion
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
                name='Lease',
                fields=[
                    ('id', models.CharField(default=coordination.models.new_lease_id, max_length=40, primary_key=True, serialize=False)),
                    ('holder', models.CharField(max_length=128)),
                    ('key_prefix', models.CharField(blank=True, max_length=16)),
                    ('ttl_seconds', models.PositiveIntegerField()),
                    ('expires_at', models.DateTimeField(db_index=True)),
                    ('fence', models.PositiveBigIntegerField(default=0)),
                    ('revoked', models.BooleanField(default=False)),
                ],
                options={
                    'db_table': 'shards_lease',
                },
            ),
            migrations.CreateModel(
                name='IdempotencyRecord',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('scope', models.CharField(max_length=64)),
                    ('key', models.CharField(max_length=255)),
                    ('request_hash', models.CharField(max_length=64)),
                    ('status', models.PositiveSmallIntegerField(null=True)),
                    ('body', models.BinaryField(null=True)),
                    ('content_type', models.CharField(blank=True, max_length=100)),
                    ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ],
                options={
                    'db_table': 'shards_idempotencyrecord',
                    'constraints': [models.UniqueConstraint(fields=('scope', 'key'), name='one_record_per_key')],
                },
            ),
            migrations.CreateModel(
                name='LeaseBinding',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('shard_id', models.CharField(max_length=128)),
                    ('incarnation', models.UUIDField(null=True)),
                    ('path', models.JSONField()),
                    ('lease', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='bindings', to='coordination.lease')),
                ],
                options={
                    'db_table': 'shards_leasebinding',
                },
            ),
            ],
            database_operations=[],
        ),
    ]
