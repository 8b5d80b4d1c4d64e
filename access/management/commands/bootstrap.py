import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from access.models import ApiKey
from access.services import api_key_create

FIRST_RUN_FILE = "first-run.txt"


def owner_only_write(path: Path, text: str) -> None:
    """Writes ``text`` to a file only its owner can read (0600), created so:
    never world-readable, not even for a moment."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class Command(BaseCommand):
    help = (
        "First run only: create an admin login and an admin API key, print them once and "
        "write them to $ZEROLOCK_DATA_DIR/first-run.txt (mode 0600). "
        "--reset-admin prints a new password for the admin login."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--reset-admin",
            action="store_true",
            help="Give the 'admin' login a new password (creating it if missing) and print it.",
        )

    def handle(self, *args, **opts):
        User = get_user_model()
        port = settings.PORT
        path = Path(settings.DATA_DIR) / FIRST_RUN_FILE
        if opts["reset_admin"]:
            password = secrets.token_urlsafe(12)
            admin = User.objects.filter(username="admin").first()
            if admin is None:
                User.objects.create_superuser("admin", "", password)
            else:
                admin.set_password(password)
                admin.is_active = admin.is_staff = admin.is_superuser = True
                admin.save()
            self.stdout.write(
                f"New password for the admin login (http://127.0.0.1:{port}/admin/): "
                f"admin / {password}"
            )
            return
        if User.objects.filter(is_superuser=True).exists() or ApiKey.objects.exists():
            where = f"they were written to {path}" if path.exists() else f"{path} is gone"
            self.stdout.write(
                f"ZeroLock is already bootstrapped; nothing to do. First-run credentials: "
                f"{where}. Lost the admin password? manage.py bootstrap --reset-admin"
            )
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "", password)
        _, raw = api_key_create(
            name="bootstrap admin", permissions=["admin"], created_by="bootstrap"
        )
        credentials = (
            "ZeroLock first run.\n"
            f"  Admin login (http://127.0.0.1:{port}/admin/): admin / {password}\n"
            f"  Approval console: http://127.0.0.1:{port}/console/ (same login)\n"
            f"  Admin API key (X-API-Key): {raw}\n"
            "  Console users: manage.py createuser NAME --role risk-officer|viewer\n"
        )
        owner_only_write(path, credentials)
        bar = "=" * 64
        self.stdout.write(
            f"{bar}\n{credentials}"
            f"These are shown ONCE here, and kept in {path} (readable by you only).\n{bar}"
        )
