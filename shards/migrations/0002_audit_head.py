from django.db import migrations


def create_head(apps, schema_editor):
    apps.get_model("shards", "AuditHead").objects.get_or_create(pk=1, defaults={"last_hash": "0" * 64})


class Migration(migrations.Migration):
    dependencies = [("shards", "0001_initial")]
    operations = [migrations.RunPython(create_head, migrations.RunPython.noop)]
