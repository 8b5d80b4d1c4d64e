"""Every pattern example runs against a live server and says it worked."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from access.services import api_key_create
from tests.conftest import ROOT

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def run_example(url: str, name: str, *args: str, **env: str) -> str:
    _, key = api_key_create(name=f"example {name}", permissions=["admin"])
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "patterns" / name / "main.py"), *args],
        env={**os.environ, "ZEROLOCK_URL": url, "ZEROLOCK_API_KEY": key, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_task_claiming_finishes_every_task_once(live_server_url):
    out = run_example(live_server_url, "task-claiming", "--agents", "8", "--tasks", "20")
    assert "done: 20/20, completed twice: 0" in out


def test_task_claiming_reaps_a_crashed_workers_tasks(live_server_url):
    out = run_example(
        live_server_url, "task-claiming", "--agents", "4", "--tasks", "10", "--reaper"
    )
    assert "crashed holding" in out and "reaper put back 1 orphaned task" in out
    assert "done: 10/10" in out


def test_file_locking_loses_no_edit(live_server_url):
    out = run_example(live_server_url, "file-locking")
    assert "expected total 60" in out and "locks left: {}" in out


def test_the_approval_gate_example_with_a_second_key_approving(live_server_url):
    _, approver = api_key_create(name="approver", permissions=["approval:decide", "shard:read"])
    out = run_example(
        live_server_url,
        "approval-gates",
        "--auto-approve",
        "--timeout",
        "20",
        ZEROLOCK_APPROVER_KEY=approver,
    )
    assert "direct commit refused: APPROVAL_REQUIRED" in out
    assert "decided: committed" in out and "'balance': 750" in out


def test_leader_election_hands_over_and_fences_the_old_leader(live_server_url):
    out = run_example(live_server_url, "leader-election")
    assert "leaders in order: ['manager-a', 'manager-b']" in out
    assert "manager-a: stale write refused: FENCED" in out
