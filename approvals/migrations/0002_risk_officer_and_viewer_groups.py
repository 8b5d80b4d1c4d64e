"""The console's two roles: "Risk officers" decide approvals; "Viewers" may only
look at the console and the dashboards."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

# A constant, not the models: migrations must not use today's model classes.
from approvals.roles import GROUP_PERMISSIONS as GROUPS


def create_groups(apps, schema_editor):
    # Permissions are normally created after all migrations; these groups need them now.
    app_config = apps.get_app_config("approvals")
    app_config.models_module = True
    create_permissions(app_config, verbosity=0)
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="approvals", codename__in=codenames)
        )


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=GROUPS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
