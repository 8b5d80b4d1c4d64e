"""``manage.py createuser NAME --role risk-officer|viewer``: a console login.

Risk officers decide approvals; viewers only look. The password is generated
and printed once unless ``--password`` gives one."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from approvals.roles import RISK_OFFICERS, VIEWERS, groups_ensure

ROLES = {"risk-officer": RISK_OFFICERS, "viewer": VIEWERS}


class Command(BaseCommand):
    help = "Create a console user: a risk officer (decides approvals) or a viewer (looks)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name")
        parser.add_argument("--role", required=True, choices=sorted(ROLES))
        parser.add_argument("--password", default="", help="Default: generated and printed.")
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **opts: Any) -> None:
        groups_ensure()
        User = get_user_model()
        name = opts["name"].strip()
        if not name:
            raise CommandError("Give the user a name.")
        if User.objects.filter(username=name).exists():
            raise CommandError(f"A user named {name!r} already exists.")
        password = opts["password"] or secrets.token_urlsafe(12)
        user = User.objects.create_user(name, opts["email"], password)
        user.groups.add(Group.objects.get(name=ROLES[opts["role"]]))
        shown = "" if opts["password"] else f" with password {password}"
        self.stdout.write(f"Created {opts['role']} {name!r}{shown}. Sign in at /console/.")
