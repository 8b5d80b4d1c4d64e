"""examples/mcp/agent.py against a live server, over real sockets: it claims every
task through /mcp, writes every result, and waits on its approval while a second
key approves it over REST."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import httpx
import pytest

from access.services import api_key_create
from tests.conftest import ROOT

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

AGENT = ROOT / "examples" / "mcp" / "agent.py"
TASKS = 6


def setup_shards(url: str, prefix: str, tasks: int) -> dict[str, str]:
    _, admin = api_key_create(name="mcp example setup", permissions=["admin"])
    shards = {"queue": f"{prefix}.tasks", "results": f"{prefix}.results", "gate": f"{prefix}.pub"}
    bodies = [
        {
            "id": shards["queue"],
            "type": "decision",
            "initial_value": {f"t{i}": {"status": "pending", "n": i} for i in range(tasks)},
        },
        {"id": shards["results"], "type": "decision", "initial_value": {}},
        {
            "id": shards["gate"],
            "type": "decision",
            "initial_value": {"published": False},
            "reversible": False,
        },
    ]
    with httpx.Client(base_url=url, headers={"X-API-Key": admin, "X-Agent-Id": "setup"}) as c:
        for body in bodies:
            r = c.post("/api/shards", json=body)
            assert r.status_code == 201, r.text
    return shards


def start_agent(url: str, key: str, agent: str, shards: dict[str, str], *args: str):
    proc = subprocess.Popen(
        [
            sys.executable,
            str(AGENT),
            "--queue",
            shards["queue"],
            "--results",
            shards["results"],
            "--gate",
            shards["gate"],
            *args,
        ],
        env={
            **os.environ,
            "ZEROLOCK_URL": url,
            "ZEROLOCK_API_KEY": key,
            "ZEROLOCK_AGENT_ID": agent,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def read_until(lines: queue.Queue[str | None], seen: list[str], prefix: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(
                f"no {prefix!r} line in {timeout} s:\n" + "\n".join(seen)
            ) from None
        if line is None:
            raise AssertionError(f"the agent ended before {prefix!r}:\n" + "\n".join(seen))
        seen.append(line)
        if line.startswith(prefix):
            return line


def finish(proc: subprocess.Popen, lines: queue.Queue[str | None], seen: list[str]) -> int:
    try:
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    while (line := lines.get(timeout=5)) is not None:
        seen.append(line)
    return code


def summary_of(seen: list[str]) -> dict[str, Any]:
    assert seen and seen[-1].startswith("{"), "\n".join(seen)
    return json.loads(seen[-1])


def test_the_agent_claims_every_task_and_waits_for_its_approval(live_server_url):
    shards = setup_shards(live_server_url, f"mcpex.{uuid.uuid4().hex[:8]}", TASKS)
    _, key = api_key_create(
        name="mcp example agent",
        permissions=["shard:read", "shard:write", "approval:request"],
    )
    _, approver = api_key_create(name="approver", permissions=["approval:decide", "shard:read"])
    proc, lines = start_agent(live_server_url, key, "mcp-worker-1", shards, "--wait", "20")
    seen: list[str] = []
    try:
        tools = read_until(lines, seen, "tools:", 15)
        assert "task_claim" in tools and "approval_get" in tools
        url_line = read_until(lines, seen, "console_url:", 15)
        approval_id = seen[-2].split()[1]
        assert approval_id.startswith("apr_") and seen[-2].endswith("is pending"), seen
        console_url = url_line.split(" ", 1)[1]
        assert console_url.startswith(live_server_url) and approval_id in console_url
        # The agent is now inside approval_get's wait: a person decides, over REST.
        time.sleep(0.5)
        with httpx.Client(
            base_url=live_server_url, headers={"X-API-Key": approver, "X-Agent-Id": "officer"}
        ) as officer:
            r = officer.post(f"/api/approvals/{approval_id}/approve", json={"reason": "ok"})
            assert r.status_code == 200, r.text
        code = finish(proc, lines, seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "\n".join(seen)
    assert code == 0, out
    summary = summary_of(seen)
    assert sorted(summary["claimed"]) == sorted(f"t{i}" for i in range(TASKS)), out
    assert summary["approval"]["status"] == "committed", out
    assert f"approval {approval_id} is committed" in out

    _, reader = api_key_create(name="reader", permissions=["shard:read"])
    with httpx.Client(base_url=live_server_url, headers={"X-API-Key": reader}) as c:
        queue_value = c.get(f"/api/shards/{shards['queue']}").json()["value"]
        results = c.get(f"/api/shards/{shards['results']}").json()["value"]
        gate = c.get(f"/api/shards/{shards['gate']}").json()
    assert all(t["status"] == "claimed" and t["holder"] for t in queue_value.values())
    assert results == {
        f"t{i}": {"by": "mcp-worker-1", "n": i, "square": i * i} for i in range(TASKS)
    }
    assert gate["value"] == {"published": True, "results": results, "by": "mcp-worker-1"}
    assert gate["version"] == summary["approval"]["commit"]["version"]


def test_agents_racing_on_one_queue_do_each_task_once_and_lose_no_result(live_server_url):
    shards = setup_shards(live_server_url, f"mcpex.{uuid.uuid4().hex[:8]}", 12)
    _, key = api_key_create(name="mcp example agents", permissions=["shard:read", "shard:write"])
    started = [
        start_agent(live_server_url, key, f"mcp-worker-{n}", shards, "--no-approval")
        for n in range(3)
    ]
    summaries = []
    for proc, lines in started:
        seen: list[str] = []
        code = finish(proc, lines, seen)
        assert code == 0, "\n".join(seen)
        summaries.append(summary_of(seen))
    claimed = [task for s in summaries for task in s["claimed"]]
    assert sorted(claimed) == sorted(f"t{i}" for i in range(12))  # each once
    _, reader = api_key_create(name="reader", permissions=["shard:read"])
    with httpx.Client(base_url=live_server_url, headers={"X-API-Key": reader}) as c:
        results = c.get(f"/api/shards/{shards['results']}").json()["value"]
    by = {task: s["agent"] for s in summaries for task in s["claimed"]}
    # Every result survived the others' commits (STALE_VERSION retried, never overwritten).
    assert results == {t: {"by": by[t], "n": int(t[1:]), "square": int(t[1:]) ** 2} for t in by}
