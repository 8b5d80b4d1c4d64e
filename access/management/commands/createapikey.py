from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from access.services import api_key_create
from common.errors import ApiError


class Command(BaseCommand):
    help = "Create an API key. The raw key is printed once, as the last line."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--permissions",
            default="shard:read,shard:write,shard:create",
            help="Comma-separated: shard:read, shard:write, shard:create, "
            "approval:request, approval:decide, approval:*, admin",
        )
        parser.add_argument(
            "--agent",
            action="append",
            default=[],
            help="Bind the key to this agent id (repeatable).",
        )
        parser.add_argument(
            "--shard-prefix",
            action="append",
            default=[],
            help="Only shards whose id starts with this (repeatable).",
        )
        parser.add_argument("--rate-limit", type=int, default=None, help="Requests per minute.")
        parser.add_argument("--expires-in-days", type=int, default=None)
        parser.add_argument(
            "--user",
            default=None,
            help="The person the key belongs to (a username): its approvals count as theirs.",
        )

    def handle(self, *args, **opts):
        permissions = [p.strip() for p in opts["permissions"].split(",") if p.strip()]
        expires = None
        if opts["expires_in_days"] is not None:
            expires = timezone.now() + timedelta(days=opts["expires_in_days"])
        user = None
        if opts["user"] is not None:
            user = get_user_model().objects.filter(username=opts["user"]).first()
            if user is None:
                raise CommandError(f"No user named {opts['user']!r}.")
        try:
            key, raw = api_key_create(
                name=opts["name"],
                permissions=permissions,
                agent_ids=opts["agent"],
                shard_prefixes=opts["shard_prefix"],
                rate_limit=opts["rate_limit"],
                expires_at=expires,
                created_by="manage.py",
                user=user,
            )
        except ApiError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            f"Created API key {key.name!r} (prefix {key.prefix}) with {', '.join(key.permissions)}."
        )
        self.stdout.write("Store it now: it is not shown again.")
        self.stdout.write(raw)
