from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approval gates"

    def ready(self) -> None:
        # The shards core knows approvals only through what is registered here.
        from django.db.models.signals import post_migrate

        from metrics.sources import metrics_source_register
        from shards.hooks import delete_hook_register, gate_register, tick_sweep_register

        from .gate import ApprovalGate
        from .models import visibility_register
        from .roles import groups_ensure
        from .routing import visible_q
        from .selectors import approval_counts
        from .services import approval_escalate_due, approval_expire_due, approvals_end

        gate_register(ApprovalGate())
        visibility_register(visible_q)
        tick_sweep_register("approvals", lambda: approval_expire_due(by="server"))
        tick_sweep_register("approvals.escalation", lambda: approval_escalate_due())
        delete_hook_register("approvals", approvals_end)
        metrics_source_register("approvals", approval_counts)
        # The console's groups come back after every migrate if someone removed them.
        post_migrate.connect(
            lambda **kwargs: groups_ensure(), sender=self, weak=False, dispatch_uid="zl-groups"
        )
