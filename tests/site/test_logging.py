"""An idle `make run` keeps quiet, so the first-run credentials printed above its
output stay in sight: beat's per-tick and the worker's per-task lines at INFO
were 270 lines a minute."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from supervision.broker import BROKER_FILE
from tests.conftest import ROOT, server_env
from zerolock_site.supervisor import children

ROUTINE = re.compile(r"Sending due task|\] received$|\] succeeded in")
ROUTINE_LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")

# Which of DEBUG, INFO, WARNING, ERROR each routine logger lets through.
LEVELS = """
import json, logging, sys
import django
django.setup()
print(json.dumps({
    name: [logging.getLogger(name).isEnabledFor(level) for level in (10, 20, 30, 40)]
    for name in sys.argv[1:]
}))
"""


def _consumed(broker: Path) -> int:
    """Messages the worker has taken from the embedded broker (kombu marks them)."""
    if not broker.exists():
        return 0
    db = sqlite3.connect(broker, timeout=30)
    try:
        return db.execute("SELECT count(*) FROM kombu_message WHERE visible = 0").fetchone()[0]
    except sqlite3.OperationalError:  # no table before the first message
        return 0
    finally:
        db.close()


@pytest.mark.live
@pytest.mark.django_db(transaction=True)  # the worker's beat reads the test database
def test_the_worker_make_run_starts_runs_its_sweeps_without_a_line_for_each(tmp_path):
    env = server_env()
    env.pop("LOG_LEVEL", None)
    env.pop("REDIS_URL", None)  # its own broker file, which the test can count
    env["ZEROLOCK_DATA_DIR"] = str(tmp_path)
    (worker,) = [kid for kid in children(env) if kid.name == "worker"]
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            worker.argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        # Beat sends a lease sweep every second and an approval sweep every two.
        deadline = time.monotonic() + 120
        while _consumed(tmp_path / BROKER_FILE) < 10:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    text = log.read_text()
    assert "ready." in text
    assert [line for line in text.splitlines() if ROUTINE.search(line)] == []


def _levels(log_level: str | None) -> dict[str, list[bool]]:
    env = {k: v for k, v in server_env().items() if k != "LOG_LEVEL"}
    if log_level:
        env["LOG_LEVEL"] = log_level
    done = subprocess.run(
        [sys.executable, "-c", LEVELS, *ROUTINE_LOGGERS],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "zerolock_site.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_routine_task_lines_are_hidden_but_warnings_and_errors_still_show():
    quiet = {name: [False, False, True, True] for name in ROUTINE_LOGGERS}
    assert _levels(None) == quiet
    assert _levels("INFO") == quiet


def test_log_level_debug_shows_the_routine_task_lines_again():
    assert _levels("DEBUG") == {name: [True, True, True, True] for name in ROUTINE_LOGGERS}


@pytest.mark.parametrize(("environ", "flag"), [({}, "INFO"), ({"LOG_LEVEL": "WARNING"}, "WARNING")])
def test_the_worker_make_run_starts_logs_at_log_level(environ, flag):
    (worker,) = [kid for kid in children(environ) if kid.name == "worker"]
    assert f"--loglevel={flag}" in worker.argv
