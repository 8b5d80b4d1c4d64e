"""The tests keep to a data directory of their own, never the var/ of `make run`:
they overwrote its first-run.txt with credentials that work nowhere, and the dev
server's worker took their webhook tasks from its broker file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.conftest import ROOT, server_env

# Where `make run` keeps its database, broker, secret key and first-run.txt.
RUN_DATA_DIR = (ROOT / "var").resolve()

PROBE = """
import json
import django
django.setup()
from django.conf import settings
print(json.dumps({
    "data_dir": str(settings.DATA_DIR),
    "broker": settings.CELERY_BROKER_URL,
    "secret_key": settings.SECRET_KEY,
}))
"""


def _probe(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "zerolock_site.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _listing(path: Path) -> dict[str, float] | None:
    if not path.exists():
        return None
    return {p.name: p.stat().st_mtime for p in path.iterdir()}


def test_the_tests_run_on_a_data_dir_that_is_not_make_runs():
    assert settings.DATA_DIR.resolve() != RUN_DATA_DIR
    if not os.environ.get("ZEROLOCK_DATA_DIR"):
        assert settings.DATA_DIR == RUN_DATA_DIR / "test"
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        assert Path(settings.DATABASES["default"]["TEST"]["NAME"]).parent == settings.DATA_DIR
    if not settings.REDIS_URL:
        broker = Path(settings.CELERY_BROKER_URL.removeprefix("sqlite:///"))
        assert broker.parent == settings.DATA_DIR


@pytest.mark.parametrize("named", [str(RUN_DATA_DIR), "var", "./var/", f"{RUN_DATA_DIR}/test/.."])
def test_settings_under_pytest_refuse_make_runs_data_dir_and_leave_it_untouched(named):
    before = _listing(RUN_DATA_DIR)
    done = _probe({**server_env(), "ZEROLOCK_DATA_DIR": named})
    assert done.returncode != 0, done.stdout
    assert "ImproperlyConfigured" in done.stderr
    assert "make run" in done.stderr
    assert _listing(RUN_DATA_DIR) == before


def test_processes_the_tests_start_share_the_tests_data_dir_broker_and_secret_key():
    # server_env() names the directory itself: it holds even for a process that
    # does not inherit pytest's PYTEST_VERSION.
    env = {k: v for k, v in server_env().items() if k != "PYTEST_VERSION"}
    done = _probe(env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["data_dir"] == str(settings.DATA_DIR)
    assert seen["secret_key"] == settings.SECRET_KEY
    assert seen["broker"] == settings.CELERY_BROKER_URL


def test_a_process_a_test_starts_with_an_environment_of_its_own_still_avoids_make_runs_data_dir():
    env = {k: v for k, v in os.environ.items() if k != "ZEROLOCK_DATA_DIR"}
    done = _probe(env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["data_dir"] == str(RUN_DATA_DIR / "test")


@pytest.mark.django_db
def test_bootstrap_in_the_tests_writes_first_run_txt_to_the_tests_data_dir(capsys):
    call_command("bootstrap")
    out = capsys.readouterr().out
    kept = re.search(r"kept in (\S+) \(", out)[1]
    assert Path(kept) == settings.DATA_DIR / "first-run.txt"
    assert Path(kept).parent != RUN_DATA_DIR
