"""The SDK guide (zerolock_sdk/README.md): every sample marked
``<!-- runs: NAME -->`` runs as printed against a live server and prints what
its comments promise; and the behaviour the guide describes holds."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

import pytest

from access.services import api_key_create
from tests.conftest import ROOT
from zerolock_sdk import CreateShardOptions, ZeroLockClient
from zerolock_sdk.task_claim import claim_next, fail_task

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

GUIDE = ROOT / "zerolock_sdk" / "README.md"

# What each sample must print (its comments say so too).
PROMISES = {
    "commit-orders": [
        "versions: 2 3 4 5",
        "refused before sending: expected_version must be an int",
    ],
    "sync-call-tasks": [
        "claimed t1: True",
        "done: True",
        "again: True",
        "gave back t2 True",
        "not mine: False",
        "[('error', 'flaky'), ('status', 'pending')]",
    ],
    "context-managers": [
        "socket open: True cache hits: 1",
        "pending approvals: list",
        "closed: True",
    ],
    "langgraph-saver": ["['start', 'plan', 'again', 'plan']"],
}


def samples() -> dict[str, str]:
    text = GUIDE.read_text()
    return dict(re.findall(r"<!-- runs: ([\w-]+) -->\n```python\n(.*?)```", text, re.S))


def test_the_guide_marks_exactly_the_samples_promised():
    assert set(samples()) == set(PROMISES)


@pytest.mark.parametrize("name", sorted(PROMISES))
def test_each_marked_sample_of_the_guide_runs_as_printed(live_server_url, tmp_path, name):
    _, key = api_key_create(name=f"guide {name}", permissions=["admin"])
    script = tmp_path / f"{name}.py"
    script.write_text(samples()[name])
    base = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLOCK_")}
    result = subprocess.run(
        [sys.executable, str(script)],
        env={**base, "ZEROLOCK_URL": live_server_url, "ZEROLOCK_API_KEY": key},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in PROMISES[name]:
        assert line in result.stdout, result.stdout


def test_a_swapped_commit_is_refused_before_anything_is_sent(live_server_url):
    _, key = api_key_create(name="swapped", permissions=["shard:read", "shard:write"])

    async def scenario() -> int:
        async with ZeroLockClient(live_server_url, agent_id="a", api_key=key) as zl:
            with pytest.raises(TypeError, match="commit_shard"):
                await zl.commit_shard("plan", 1, {"step": 2})  # version and value swapped
            with pytest.raises(TypeError, match="expected_version"):
                await zl.commit("plan", {"step": 2}, 1)
            return zl.requests_sent

    assert asyncio.run(scenario()) == 0


def test_a_task_given_back_is_pending_without_its_holder_in_one_request(live_server_url):
    """fail_task used to remove the holder in a second request, after the task was
    pending again: a claimant in between lost its holder to it."""
    _, key = api_key_create(name="tasks", permissions=["shard:read", "shard:write", "shard:create"])

    async def scenario() -> tuple[bool, int, dict, bool]:
        async with ZeroLockClient(live_server_url, agent_id="w1", api_key=key) as zl:
            await zl.create_shard(
                "q", CreateShardOptions(initial_value={"t": {"status": "pending"}})
            )
            await claim_next(zl, "q")
            sent = zl.requests_sent
            gave_back = await fail_task(zl, "q", "t", error="flaky")
            requests = zl.requests_sent - sent
            task = (await zl.get_shard("q")).value["t"]
            again = await fail_task(zl, "q", "t")  # no longer held: nothing written
            return gave_back, requests, task, again

    gave_back, requests, task, again = asyncio.run(scenario())
    assert (gave_back, requests, again) == (True, 1, False)
    assert task == {"status": "pending", "error": "flaky"}
