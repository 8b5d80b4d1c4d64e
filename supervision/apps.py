from django.apps import AppConfig


class SupervisionConfig(AppConfig):
    name = "supervision"
    verbose_name = "Worker and beat heartbeats"

    def ready(self) -> None:
        from celery.signals import worker_process_init

        from common.process import die_with_parent

        from . import heartbeats

        heartbeats.connect_celery_signals()
        # The worker's pool process dies with the worker, even one killed -9.
        worker_process_init.connect(
            lambda **kwargs: die_with_parent(), weak=False, dispatch_uid="zerolock-pool-pdeathsig"
        )
