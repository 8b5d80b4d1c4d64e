from django.apps import AppConfig


class CoordinationConfig(AppConfig):
    name = "coordination"
    verbose_name = "Transactions, leases, watch and idempotency"

    def ready(self) -> None:
        # Lease expiry runs at the start of every write transaction in the shards
        # core, and a deleted shard's lease bindings go with it.
        from shards.hooks import delete_hook_register, tick_sweep_register, write_sweep_register

        from .leases import (
            LEASE_SWEEP,
            lease_bindings_drop,
            leases_due,
            leases_expire_due,
            leases_expire_now,
        )

        write_sweep_register(LEASE_SWEEP, leases_expire_due, due=leases_due)
        # And once a second in every process with open sockets: a session lease
        # whose agent left ends on time even when nobody writes.
        tick_sweep_register(LEASE_SWEEP, leases_expire_now)

        from django.db.models.signals import post_save

        from .leases import next_expiry
        from .models import Lease

        def noted(sender: type, instance: Lease, **_: object) -> None:
            if not instance.revoked:
                next_expiry.note(instance.expires_at)

        # Every lease saved in this process moves its next-expiry deadline.
        post_save.connect(noted, sender=Lease, weak=False, dispatch_uid="lease-next-expiry")
        delete_hook_register("leases", lease_bindings_drop)

        # Reservations end with their lease, and by time in the same per-second tick.
        from .leases import lease_end_hook_register
        from .reservations import reservations_end_with_lease, reservations_expire_now

        lease_end_hook_register("reservations", reservations_end_with_lease)
        tick_sweep_register("reservations", reservations_expire_now)
