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
                name='AuditHead',
                fields=[
                    ('id', models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                    ('last_hash', models.CharField(default='0000000000000000000000000000000000000000000000000000000000000000', max_length=64)),
                ],
                options={
                    'db_table': 'shards_audithead',
                },
            ),
            migrations.CreateModel(
                name='AuditEntry',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                    ('action', models.CharField(choices=[('shard.create', 'Shard Create'), ('shard.commit', 'Shard Commit'), ('shard.commit_rejected', 'Shard Commit Rejected'), ('shard.delete', 'Shard Delete'), ('key.create', 'Key Create'), ('key.revoke', 'Key Revoke'), ('key.change', 'Key Change'), ('auth.failure', 'Auth Failure'), ('approval.requested', 'Approval Requested'), ('approval.approved', 'Approval Approved'), ('approval.rejected', 'Approval Rejected'), ('approval.expired', 'Approval Expired'), ('approval.committed', 'Approval Committed'), ('approval.commit_failed', 'Approval Commit Failed'), ('lease.granted', 'Lease Granted'), ('lease.ended', 'Lease Ended'), ('lease.released_path', 'Lease Released Path')], db_index=True, max_length=32)),
                    ('agent_id', models.CharField(blank=True, db_index=True, max_length=128)),
                    ('key_prefix', models.CharField(blank=True, max_length=16)),
                    ('shard_id', models.CharField(blank=True, db_index=True, max_length=128)),
                    ('version_before', models.PositiveBigIntegerField(blank=True, null=True)),
                    ('version_after', models.PositiveBigIntegerField(blank=True, null=True)),
                    ('value', models.JSONField(blank=True, null=True)),
                    ('value_hash', models.CharField(blank=True, max_length=64)),
                    ('details', models.JSONField(blank=True, default=dict)),
                    ('prev_hash', models.CharField(max_length=64)),
                    ('entry_hash', models.CharField(max_length=64, unique=True)),
                ],
                options={
                    'verbose_name_plural': 'audit entries',
                    'db_table': 'shards_auditentry',
                    'ordering': ['id'],
                    'indexes': [models.Index(fields=['shard_id', 'version_after'], name='shards_audi_shard_i_2deaed_idx')],
                },
            ),
            ],
            database_operations=[],
        ),
    ]
