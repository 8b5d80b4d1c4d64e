"""`make run`'s process supervisor: the web server, and one Celery worker that
runs beat in a thread (zerolock_site/celery.py).

- The web server (uvicorn, or Daphne if ZEROLOCK_SERVER says so) is
  the node: if it exits, everything stops and the supervisor exits non-zero.
- The worker is a helper: when it dies (or its beat thread ends, which ends it)
  it is restarted with exponential backoff (at once, then 1 s doubling to 30 s;
  from the start again once it has stayed up 60 s) while HTTP and WebSockets
  keep serving. Its death is written to the worker's and beat's heartbeat rows,
  so /api/health says "down" at once.
- Every child runs in its own process group, and dies with the supervisor
  (PR_SET_PDEATHSIG): nothing of a worker ever outlives it.
- SIGINT/SIGTERM: SIGTERM to each child, SIGKILL to each group still alive
  after the grace period; everything is gone within ZEROLOCK_STOP_SECONDS (6 s).
  The web server finishes the requests in flight in that time, or answers them
  503 (zerolock_site/wsgi_bridge.py).

Run by bin/serve: ``python -m zerolock_site.supervisor``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from subprocess import Popen

from common.process import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
# uvicorn serves about 1.5x Daphne's requests per second here (bench/README.md).
DEFAULT_SERVER = "uvicorn"
logger = logging.getLogger("zerolock.supervisor")

BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 30.0
# A restarted process that stays up this long starts again from the first delay.
BACKOFF_RESET_AFTER_SECONDS = 60.0
POLL_SECONDS = 0.2
# How long a restart waits for its predecessor's death to be written (first death:
# the reporter sets Django up first, about a second).
REPORT_WAIT_SECONDS = 5.0


# Reads the environment itself, not settings.py: the launcher runs before Django
# is configured (and must not configure it: its children each do, their own way).
def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


@dataclass
class Child:
    name: str
    argv: list[str]
    restart: bool  # False: the node itself; its exit stops everything
    # What /api/health shows down when it dies (the worker carries beat's thread).
    roles: tuple[str, ...] = ()
    proc: Popen | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    # Set once its death is written to /api/health's heartbeat row (or failed).
    death_reported: threading.Event | None = None
    restarts: int = field(default=0)

    def start(self) -> None:
        self.proc = Popen(
            self.argv,
            cwd=ROOT,
            process_group=0,  # its own group: Ctrl-C reaches only the supervisor
            preexec_fn=die_with_parent,
        )
        self.started_at = time.monotonic()
        self.restart_at = None
        logger.info("started %s (pid %s)", self.name, self.proc.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_leader(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None  # alive() says so
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL the whole group: leftovers such as a killed worker's pool process."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def next_delay(self) -> float:
        if time.monotonic() - self.started_at >= BACKOFF_RESET_AFTER_SECONDS:
            self.failures = 0
        # 0 (a first death is restarted at once), then 1, 2, 4 ... up to the cap.
        delay = 0.0 if not self.failures else BACKOFF_FIRST_SECONDS * 2 ** (self.failures - 1)
        self.failures += 1
        return min(BACKOFF_CAP_SECONDS, delay)


# The web servers ZEROLOCK_SERVER may name, each by its own entry point: uvicorn
# (httptools + uvloop, with the bridge's drain at shutdown) and Daphne (with the
# patches it needs). gunicorn is gone (docs/decisions.md).
WEB_SERVERS = {
    "uvicorn": "zerolock_site.uvicorn_server",
    "daphne": "zerolock_site.daphne_server",
}


def web_command(environ: Mapping[str, str], bind: str, port: str) -> list[str]:
    """The web server ZEROLOCK_SERVER names, as bin/serve and the tests' live
    servers start it: uvicorn (the default) or daphne."""
    server = environ.get("ZEROLOCK_SERVER", DEFAULT_SERVER)
    if server not in WEB_SERVERS:
        raise SystemExit(f"ZEROLOCK_SERVER={server!r}: expected uvicorn or daphne")
    return [sys.executable, "-m", WEB_SERVERS[server], "--host", bind, "--port", port]


def children(environ: dict[str, str]) -> list[Child]:
    python = sys.executable
    port = environ.get("PORT", "8000")
    bind = environ.get("BIND", "127.0.0.1")
    web = web_command(environ, bind, port)
    celery = [python, "-m", "celery", "-A", "zerolock_site"]
    return [
        Child("web", web, restart=False),
        # One process runs the tasks and, in a thread, beat (zerolock_site/celery.py):
        # nothing to discover or gossip with, and only ever one beat. Apart, with
        # a prefork pool of one, they were three processes of 120-150 MB each.
        Child(
            "worker",
            [
                *celery,
                "worker",
                # The worker's own level, as settings.LOGGING's root has it (Celery
                # sets its root logger from this flag, not from LOGGING).
                f"--loglevel={environ.get('LOG_LEVEL', 'INFO')}",
                "--pool=solo",
                "--beat-thread",
                "--without-gossip",
                "--without-mingle",
            ],
            restart=True,
            roles=("worker", "beat"),
        ),  # fmt: skip
    ]


class DeathReporter:
    """Writes "down" to the heartbeat row of a dead worker or beat, in a thread:
    the database may be slow or down, and supervision must not wait for it.

    Django is set up on the first death, not before: a supervisor that imported
    it at start held 100 MB for nothing while all is well. The death is stamped
    with the moment it was seen, so a mark written after the restarted process
    has already beaten again does not hide that heartbeat."""

    def __init__(self) -> None:
        self.queue: queue.Queue[tuple[tuple[str, ...], datetime, threading.Event]] = queue.Queue()
        threading.Thread(target=self._run, name="death-reporter", daemon=True).start()

    def report(self, roles: tuple[str, ...]) -> threading.Event:
        """Queues the death; the event is set once it is written (or failed)."""
        done = threading.Event()
        self.queue.put((roles, datetime.now(UTC), done))
        return done

    def _run(self) -> None:
        first = self.queue.get()
        done = first[2]
        try:
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zerolock_site.settings")
            import django

            django.setup()
            from django.db import close_old_connections

            from supervision.heartbeats import heartbeat_mark_down
            from supervision.models import Role
        except Exception:
            logger.exception("cannot report deaths to /api/health")
            done.set()
            while True:  # nobody waits on an event that is never set
                self.queue.get()[2].set()
        roles, seen_at, done = first
        while True:
            try:
                for role in roles:
                    heartbeat_mark_down(role=Role(role), at=seen_at)
            except Exception:
                logger.exception("could not mark %s down", roles)
            finally:
                close_old_connections()
                done.set()
            roles, seen_at, done = self.queue.get()


class Supervisor:
    def __init__(
        self, kids: list[Child], on_death: Callable[[tuple[str, ...]], threading.Event]
    ) -> None:
        self.kids = kids
        self.on_death = on_death
        self.stopping = False
        self.stop_seconds = _env_float("ZEROLOCK_STOP_SECONDS", 6.0)

    def request_stop(self, signum: int, frame: object) -> None:
        if not self.stopping:
            logger.info("%s: stopping", signal.Signals(signum).name)
        self.stopping = True

    def run(self) -> int:
        for kid in self.kids:
            kid.start()
        code = 0
        while not self.stopping:
            time.sleep(POLL_SECONDS)
            for kid in self.kids:
                if self.stopping:
                    break
                if kid.proc is not None and not kid.alive() and kid.restart_at is None:
                    status = kid.proc.returncode
                    kid.kill_group()
                    if not kid.restart:
                        logger.error("%s exited (%s): stopping everything", kid.name, status)
                        code = status or 1
                        self.stopping = True
                        break
                    delay = kid.next_delay()
                    logger.warning("%s exited (%s); restarting in %.0f s", kid.name, status, delay)
                    kid.death_reported = self.on_death(kid.roles or (kid.name,))
                    kid.restart_at = time.monotonic() + delay
                elif self._may_restart(kid):
                    kid.restarts += 1
                    kid.start()
        self.stop_all()
        return code

    @staticmethod
    def _may_restart(kid: Child) -> bool:
        """Its backoff is over, and its death is on record: a new process that beat
        before the mark was written would have it hidden, or overwritten. A
        database that does not answer holds a restart back at most a few seconds."""
        now = time.monotonic()
        if kid.restart_at is None or now < kid.restart_at:
            return False
        reported = kid.death_reported
        return reported is None or reported.is_set() or now >= kid.restart_at + REPORT_WAIT_SECONDS

    def stop_all(self) -> None:
        for kid in self.kids:
            kid.signal_leader(signal.SIGTERM)
        began = time.monotonic()
        deadline = began + self.stop_seconds
        running = {k.name for k in self.kids if k.alive()}
        while time.monotonic() < deadline and running:
            time.sleep(0.05)
            for kid in self.kids:
                if kid.name in running and not kid.alive():
                    running.discard(kid.name)
                    logger.info("%s stopped in %.1f s", kid.name, time.monotonic() - began)
        for kid in self.kids:
            if kid.alive():
                logger.warning("%s still running after %.0f s: killed", kid.name, self.stop_seconds)
            kid.kill_group()
            if kid.proc is not None:
                kid.proc.wait()
        logger.info("stopped")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.chdir(ROOT)
    kids = children(dict(os.environ))
    reporter = DeathReporter()
    supervisor = Supervisor(kids, reporter.report)
    signal.signal(signal.SIGINT, supervisor.request_stop)
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    server = os.environ.get("ZEROLOCK_SERVER", DEFAULT_SERVER)
    print(
        f"ZeroLock ({server}) on http://{os.environ.get('BIND', '127.0.0.1')}:"
        f"{os.environ.get('PORT', '8000')}/ with a Celery worker (and beat). Ctrl-C stops all.",
        flush=True,
    )
    return supervisor.run()


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    # Not sys.exit: interpreter teardown waited seconds for what the death
    # reporter's Django had set up; the children are already gone.
    os._exit(code)
