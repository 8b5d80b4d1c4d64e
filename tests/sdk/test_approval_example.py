"""examples/patterns/approval-gates from a clean start, as examples/README.md runs
it: with a second key made the way the README shows it works end to end; without
a fit second key (or without any key, or without a server) it stops with one
clear line, never a traceback, and never leaves a pending request behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from access.services import api_key_create
from approvals.models import Approval
from shards.models import Shard
from tests.conftest import ROOT, _free_port, server_env

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
EXAMPLE = ROOT / "examples" / "patterns" / "approval-gates" / "main.py"


def admin_key() -> str:
    return api_key_create(name="example admin", permissions=["admin"])[1]


def run_example(url: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLOCK_")}
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        env={**base, "ZEROLOCK_URL": url, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def assert_one_clear_line(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]


def nothing_left_behind() -> None:
    assert not Approval.objects.filter(status="pending").exists()
    assert not Shard.objects.filter(id__startswith="example.treasury").exists()


def test_auto_approve_with_a_second_key_made_as_the_readme_shows(live_server_url):
    made = subprocess.run(
        [sys.executable, "manage.py", "createapikey", "approver"]
        + ["--permissions", "approval:decide"],
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    )
    approver = made.stdout.strip().splitlines()[-1]
    result = run_example(
        live_server_url,
        "--auto-approve",
        "--timeout",
        "20",
        ZEROLOCK_API_KEY=admin_key(),
        ZEROLOCK_APPROVER_KEY=approver,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "direct commit refused: APPROVAL_REQUIRED" in result.stdout
    assert "status: approved" in result.stdout and "'balance': 750" in result.stdout
    assert not Approval.objects.filter(status="pending").exists()
    assert Approval.objects.get().status == "committed"


def test_auto_approve_without_a_second_key_says_how_to_make_one(live_server_url):
    result = run_example(live_server_url, "--auto-approve", ZEROLOCK_API_KEY=admin_key())
    assert_one_clear_line(result, "ZEROLOCK_APPROVER_KEY", "manage.py createapikey")
    nothing_left_behind()


def test_auto_approve_with_the_requesting_key_is_refused_before_asking(live_server_url):
    key = admin_key()
    result = run_example(
        live_server_url, "--auto-approve", ZEROLOCK_API_KEY=key, ZEROLOCK_APPROVER_KEY=key
    )
    assert_one_clear_line(result, "self-approval", "createapikey")
    nothing_left_behind()


@pytest.mark.parametrize(
    ("approver_permissions", "says"),
    [(["shard:read"], "may not decide"), (None, "not a valid key")],
)
def test_auto_approve_with_an_unfit_approver_key_stops_before_asking(
    live_server_url, approver_permissions, says
):
    approver = (
        api_key_create(name="reader", permissions=approver_permissions)[1]
        if approver_permissions
        else "zl_00000000.not-a-real-key"
    )
    result = run_example(
        live_server_url,
        "--auto-approve",
        ZEROLOCK_API_KEY=admin_key(),
        ZEROLOCK_APPROVER_KEY=approver,
    )
    assert_one_clear_line(result, says, "createapikey")
    nothing_left_behind()


def test_no_key_at_all_is_one_line_naming_the_variable(live_server_url):
    result = run_example(live_server_url)
    assert_one_clear_line(result, "ZEROLOCK_API_KEY")
    nothing_left_behind()


def test_no_server_is_one_line_naming_the_address():
    url = f"http://127.0.0.1:{_free_port()}"
    result = run_example(url, ZEROLOCK_API_KEY="zl_00000000.whatever")
    assert_one_clear_line(result, url, "make run")
