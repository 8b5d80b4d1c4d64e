"""Takes over models that used to live in the shards app, on their old tables."""


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
                name='CommitSample',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('at', models.DateTimeField(db_index=True)),
                    ('shard_id', models.CharField(max_length=128)),
                    ('latency_ms', models.FloatField()),
                    ('outcome', models.CharField(max_length=8)),
                ],
                options={
                    'db_table': 'shards_commitsample',
                },
            ),
            migrations.CreateModel(
                name='MetricCounter',
                fields=[
                    ('name', models.CharField(max_length=64, primary_key=True, serialize=False)),
                    ('value', models.BigIntegerField(default=0)),
                ],
                options={
                    'db_table': 'shards_metriccounter',
                },
            ),
            migrations.CreateModel(
                name='SocketGauge',
                fields=[
                    ('process', models.CharField(max_length=128, primary_key=True, serialize=False)),
                    ('connections', models.IntegerField(default=0)),
                    ('subscriptions', models.IntegerField(default=0)),
                    ('shard_subscribers', models.JSONField(default=dict)),
                    ('updated_at', models.DateTimeField(db_index=True)),
                ],
                options={
                    'db_table': 'shards_socketgauge',
                },
            ),
            ],
            database_operations=[],
        ),
    ]
