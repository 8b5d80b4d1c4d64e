"""``manage.py createuser NAME --role risk-officer|viewer``: a console login.

Risk officers decide approvals; viewers only look. The password is generated
and printed once unless ``--password`` gives one. The name, e-mail and password
pass the same checks as the admin's *Add user* form: the user model's own
validation (username characters and length, uniqueness, e-mail) and
AUTH_PASSWORD_VALIDATORS; a refusal creates nothing."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from approvals.roles import RISK_OFFICERS, VIEWERS, groups_ensure

ROLES = {"risk-officer": RISK_OFFICERS, "viewer": VIEWERS}


def _refusal(exc: ValidationError, field: str) -> CommandError:
    errors = exc.message_dict if hasattr(exc, "error_dict") else {field: exc.messages}
    return CommandError(
        "; ".join(f"{name}: {' '.join(messages)}" for name, messages in errors.items())
    )


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
        name = User.normalize_username(opts["name"].strip())
        if not name:
            raise CommandError("Give the user a name.")
        user = User(username=name, email=User.objects.normalize_email(opts["email"]))
        try:
            # The stored password is a hash, set below; everything else is checked.
            user.full_clean(exclude=["password"])
        except ValidationError as exc:
            raise _refusal(exc, "username") from None
        password = opts["password"] or secrets.token_urlsafe(12)
        try:
            password_validation.validate_password(password, user)
        except ValidationError as exc:
            raise _refusal(exc, "password") from None
        user.set_password(password)
        with transaction.atomic():
            user.save()
            user.groups.add(Group.objects.get(name=ROLES[opts["role"]]))
        shown = "" if opts["password"] else f" with password {password}"
        self.stdout.write(f"Created {opts['role']} {name!r}{shown}. Sign in at /console/.")
