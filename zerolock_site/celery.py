import logging
import os
import threading
from typing import Any

import click
from celery import Celery, bootsteps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zerolock_site.settings")

app = Celery("zerolock")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

logger = logging.getLogger(__name__)


class BeatThread(bootsteps.StartStopStep):
    """``celery worker --beat-thread``: beat runs as a thread of the worker.

    ``make run`` starts one worker and one beat; as separate processes they were
    two Django processes of about 130 MB each, for a beat that publishes a sweep
    a second. Celery's own ``--beat`` forks a process. A beat thread that ends
    while the worker runs ends the worker too, so the supervisor restarts both:
    a beat never silently stops."""

    label = "BeatThread"
    conditional = True

    def __init__(self, w: Any, beat_thread: bool = False, **kwargs: Any) -> None:
        self.enabled = beat_thread
        super().__init__(w, **kwargs)

    def create(self, w: Any) -> Any:
        return _Beat(w.app)


class _Beat(threading.Thread):
    def __init__(self, celery_app: Celery) -> None:
        super().__init__(name="beat", daemon=True)
        from celery.beat import Service

        # A short loop, as Celery's threaded beat has, so a stop is quick; no
        # remote control: the worker around it answers for this process.
        self.service = Service(
            celery_app,
            max_interval=1,
            scheduler_cls=celery_app.conf.beat_scheduler,
            remote_control=False,
        )
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self.service.app.set_current()
            self.service.start()
        finally:
            if not self.stopping.is_set():
                logger.critical("the beat thread ended: stopping the worker with it")
                os._exit(70)

    def stop(self) -> None:
        self.stopping.set()
        self.service.stop(wait=True)


app.user_options["worker"].add(
    click.Option(
        ["--beat-thread"],
        is_flag=True,
        default=False,
        help="Run beat as a thread of this worker (make run's supervisor does).",
    )
)
app.steps["worker"].add(BeatThread)
