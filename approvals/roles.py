"""The console's two roles as groups: "Risk officers" decide approvals,
"Viewers" only look. A migration creates them; ``manage.py bootstrap`` and
``groups_ensure`` put them back if they were removed."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

RISK_OFFICERS, VIEWERS = "Risk officers", "Viewers"
GROUP_PERMISSIONS = {
    RISK_OFFICERS: ["view_approval", "decide_approval"],
    VIEWERS: ["view_approval"],
}


def groups_ensure() -> None:
    for name, codenames in GROUP_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="approvals", codename__in=codenames)
        )
