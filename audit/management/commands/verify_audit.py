from django.core.management.base import BaseCommand, CommandError

from audit.chain import verify_chain


class Command(BaseCommand):
    help = "Walk the audit hash chain; exit non-zero at the first broken link."

    def handle(self, *args, **opts):
        checked, broken = verify_chain()
        if broken is not None:
            raise CommandError(
                f"Audit chain broken at entry #{broken.entry_id}: {broken.reason} "
                f"({checked} entries verified before it)."
            )
        self.stdout.write(f"Audit chain intact: {checked} entries verified.")
