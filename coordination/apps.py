from django.apps import AppConfig


class CoordinationConfig(AppConfig):
    name = "coordination"
    verbose_name = "Transactions, leases, watch and idempotency"

    def ready(self) -> None:
        # Lease expiry runs at the start of every write transaction in the shards
        # core, and a deleted shard's lease bindings go with it.
        from shards.hooks import delete_hook_register, write_sweep_register

        from .leases import LEASE_SWEEP, lease_bindings_drop, leases_due, leases_expire_due

        write_sweep_register(LEASE_SWEEP, leases_expire_due, due=leases_due)
        delete_hook_register("leases", lease_bindings_drop)
