import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from access.models import ApiKey
from access.services import api_key_create


class Command(BaseCommand):
    help = "First run only: create an admin login and an admin API key and print them once."

    def handle(self, *args, **opts):
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists() or ApiKey.objects.exists():
            self.stdout.write("ZeroLock is already bootstrapped; nothing to do.")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "", password)
        _, raw = api_key_create(
            name="bootstrap admin", permissions=["admin"], created_by="bootstrap"
        )
        bar = "=" * 64
        port = os.environ.get("PORT", "8000")
        self.stdout.write(
            f"{bar}\nZeroLock first run. These are shown ONCE; store them now.\n"
            f"  Admin login (http://127.0.0.1:{port}/admin/): admin / {password}\n"
            f"  Approval console: http://127.0.0.1:{port}/console/ (same login)\n"
            f"  Admin API key (X-API-Key): {raw}\n{bar}"
        )
