"""examples/patterns/approval-policies runs against a live server and says it worked."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from access.services import api_key_create
from tests.conftest import ROOT

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

EXAMPLE = ROOT / "examples" / "patterns" / "approval-policies" / "main.py"


def run(url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), "--payments", "6", "--limit", "50"],
        env={**os.environ, "ZEROLOCK_URL": url, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_the_policy_example_applies_the_small_payments_and_leaves_the_large_one(
    live_server_url,
):
    _, agent = api_key_create(
        name="payer", permissions=["shard:read", "shard:create", "approval:request"]
    )
    _, officer = api_key_create(name="officer", permissions=["approval:policy"])
    result = run(live_server_url, ZEROLOCK_API_KEY=agent, ZEROLOCK_POLICY_KEY=officer)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "small payments applied by the policy: 6/6" in result.stdout
    assert "a payment of 500: pending" in result.stdout


def test_the_policy_example_refuses_one_key_for_both_roles(live_server_url):
    _, key = api_key_create(name="both", permissions=["admin"])
    result = run(live_server_url, ZEROLOCK_API_KEY=key, ZEROLOCK_POLICY_KEY=key)
    assert result.returncode == 2 and "second key" in result.stderr
