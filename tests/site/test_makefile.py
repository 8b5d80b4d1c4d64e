"""The Makefile as a new user meets it: installs through the lock, again when
TEST_EXTRAS changes, and `make test` kept off the var/ that `make run` uses.

The Makefile runs for real, in a copy of it in a scratch directory; the venv's
tools there are scripts that write down what they were run with (the real ones
would run the whole suite)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import ROOT

LOCK = "requirements-lock.txt"
TOOLS = ("python", "ruff", "lint-imports", "mypy")
# What a caller's make or shell may have set that would change what is tested.
UNSET = {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "TEST_EXTRAS", "ZEROLOCK_DATA_DIR"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for name in ("pyproject.toml", LOCK):
        (tmp_path / name).write_text("")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in TOOLS:
        script = bin_dir / tool
        script.write_text(
            f'#!/bin/sh\necho "{tool} ${{ZEROLOCK_DATA_DIR:-unset}}" >> "{tmp_path}/seen"\n'
        )
        script.chmod(0o755)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "serve").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "serve").chmod(0o755)
    return tmp_path


def installed(project: Path, *extras_sets: str) -> None:
    """As if the venv had been installed with each of these TEST_EXTRAS: its
    inputs older than its stamps."""
    long_ago = time.time() - 3600
    for name in ("pyproject.toml", LOCK, ".venv/bin/python"):
        os.utime(project / name, (long_ago, long_ago))
    (project / ".venv" / ".installed").touch()
    for extras in extras_sets:
        (project / ".venv" / f".installed-{extras.replace(',', '-')}").touch()


def make(project: Path, *args: str, **env: str) -> str:
    done = subprocess.run(
        ["make", *args],
        cwd=project,
        env={**{k: v for k, v in os.environ.items() if k not in UNSET}, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def seen(project: Path) -> list[str]:
    return (project / "seen").read_text().splitlines()


def test_make_test_installs_again_when_test_extras_change(project):
    installed(project, "test")
    assert "pip install" not in make(project, "-n", "test")
    assert "pip install" not in make(project, "-n", "test", "TEST_EXTRAS=test")
    crewai = make(project, "-n", "test", "TEST_EXTRAS=test,crewai,temporal")
    assert f'pip install --quiet -c {LOCK} -e ".[test,crewai,temporal]"' in crewai
    installed(project, "test", "test,crewai,temporal")
    assert "pip install" not in make(project, "-n", "test", "TEST_EXTRAS=test,crewai,temporal")


def test_make_installs_every_set_of_extras_through_the_lock(project):
    run = make(project, "-n", "run")
    assert f"pip install --quiet -c {LOCK} -e .\n" in run
    assert f'pip install --quiet -c {LOCK} -e ".[test]"' not in run
    test = make(project, "-n", "test")
    assert f'pip install --quiet -c {LOCK} -e ".[test]"' in test


def test_a_new_lock_is_installed_by_the_next_make_run_and_make_test(project):
    installed(project, "test")
    assert "pip install" not in make(project, "-n", "run")
    (project / LOCK).touch()
    assert f"pip install --quiet -c {LOCK} -e .\n" in make(project, "-n", "run")
    assert f'-c {LOCK} -e ".[test]"' in make(project, "-n", "test")


def test_every_step_of_make_test_runs_on_the_tests_data_dir(project):
    installed(project, "test")
    make(project, "test")
    tests_dir = project / settings.TEST_DATA_DIR.relative_to(settings.BASE_DIR)
    assert seen(project) == [f"{tool} {tests_dir}" for tool in ("ruff", "lint-imports", "mypy")] + [
        f"python {tests_dir}"
    ]


def test_make_test_keeps_the_data_dir_its_caller_names(project, tmp_path):
    installed(project, "test")
    make(project, "test", ZEROLOCK_DATA_DIR=str(tmp_path / "ci-sqlite"))
    assert {line.split(" ", 1)[1] for line in seen(project)} == {str(tmp_path / "ci-sqlite")}


def test_make_run_is_not_given_the_tests_data_dir(project):
    installed(project)
    make(project, "run")
    assert seen(project) == ["python unset", "python unset"]  # migrate, bootstrap
