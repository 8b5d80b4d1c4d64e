"""An agent driven through ZeroLock's MCP endpoint with the official ``mcp`` client.

It connects to ``<ZEROLOCK_URL>/mcp`` with a key and an agent id, lists the tools,
claims tasks from a task queue with ``task_claim`` until ``NOTHING_TO_CLAIM``,
"does" each one and writes its result into a results shard with ``shard_commit``
(on ``STALE_VERSION`` it takes the error's ``current_version`` and
``current_value``, or re-reads, and commits again: another agent wrote first).
Then it asks a person to approve publishing the results to an irreversible shard
(``approval_request``), prints the ``console_url`` where someone decides, and
waits with ``approval_get`` (``wait_seconds``) until the approval is decided.

    export ZEROLOCK_URL=http://127.0.0.1:8000 ZEROLOCK_API_KEY=zl_... ZEROLOCK_AGENT_ID=worker-1
    .venv/bin/python examples/mcp/agent.py --setup 5      # creates a demo queue, then works it

The last line it prints is a JSON summary (claimed tasks, results written, stale
retries, the approval's final status). Exit status: 0 when the approval was
committed, 1 when it was decided otherwise (rejected, expired, stale), 2 on a
refusal it cannot handle.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

WAIT_SLICE = 50  # approval_get waits at most this long per call (the tool's limit)


class Refused(Exception):
    """A tool answered is_error with the API's envelope."""

    def __init__(self, tool: str, error: dict[str, Any]) -> None:
        super().__init__(f"{tool}: {error.get('code')}: {error.get('message', '')}")
        self.error = error

    @property
    def code(self) -> str:
        return str(self.error.get("code", ""))


class Agent:
    def __init__(self, client: Client, agent_id: str) -> None:
        self.client = client
        self.agent_id = agent_id
        self.stale_retries = 0

    async def call(self, tool: str, **arguments: Any) -> Any:
        """One tool call: its structured content, or Refused with the API's error."""
        result = await self.client.call_tool(tool, arguments)
        data = result.structured_content
        if data is None and result.content and result.content[0].type == "text":
            data = json.loads(result.content[0].text)
        if result.is_error:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            raise Refused(tool, error or {"code": "UNKNOWN", "message": str(data)})
        return data

    async def ensure_shard(self, shard_id: str, initial: Any, *, reversible: bool = True) -> None:
        try:
            await self.call(
                "shard_create",
                id=shard_id,
                type="decision",
                initial_value=initial,
                reversible=reversible,
            )
            print(f"created {shard_id}")
        except Refused as refused:
            if refused.code != "SHARD_EXISTS":
                raise
            print(f"{shard_id} exists already")

    async def claim_all(self, queue: str, results: str) -> list[str]:
        """Claim and do tasks until the queue has nothing left to claim."""
        done: list[str] = []
        while True:
            try:
                claimed = await self.call(
                    "task_claim",
                    shard_id=queue,
                    where={"status": "pending"},
                    set={"status": "claimed"},
                )
            except Refused as refused:
                if refused.code == "NOTHING_TO_CLAIM":
                    print(f"nothing left to claim in {queue}")
                    return done
                raise
            task_id, task = claimed["task_id"], claimed["task"]
            print(f"claimed {task_id}: {task}")
            await self.write_result(results, task_id, do(task_id, task, self.agent_id))
            done.append(task_id)

    async def write_result(self, results: str, task_id: str, result: Any) -> None:
        """results[task_id] = result, against the version read; on STALE_VERSION
        decide again from the current value, never resend the same version."""
        shard = await self.call("shard_read", shard_id=results)
        version, value = shard["version"], shard["value"]
        while True:
            merged = dict(value or {})
            merged[task_id] = result
            try:
                answer = await self.call(
                    "shard_commit",
                    shard_id=results,
                    expected_version=version,
                    new_value=merged,
                    idempotency_key=f"{self.agent_id}-{task_id}-{version}",
                )
                print(f"wrote {task_id} into {results} (version {answer['version']})")
                return
            except Refused as refused:
                if refused.code != "STALE_VERSION":
                    raise
                self.stale_retries += 1
                version = refused.error["current_version"]
                if "current_value" in refused.error:
                    value = refused.error["current_value"]
                else:  # a key without shard:read gets no value: read it
                    shard = await self.call("shard_read", shard_id=results)
                    version, value = shard["version"], shard["value"]
                print(f"STALE_VERSION on {results}: retrying against version {version}")

    async def publish(self, gate: str, results: str, wait: float) -> dict[str, Any]:
        """Ask for approval to write the results into the irreversible shard, and
        wait until a person decides (or ``wait`` seconds pass)."""
        current = await self.call("shard_read", shard_id=gate)
        summary = await self.call("shard_read", shard_id=results)
        proposed = {"published": True, "results": summary["value"], "by": self.agent_id}
        approval = await self.call(
            "approval_request",
            shard_id=gate,
            proposed_value=proposed,
            expected_version=current["version"],
            description=f"Publish {len(summary['value'] or {})} results from {results}",
            ttl_seconds=600,
        )
        print(f"approval {approval['id']} is {approval['status']}")
        print(f"console_url: {approval['console_url']}", flush=True)
        deadline = time.monotonic() + wait
        while approval["status"] == "pending" and time.monotonic() < deadline:
            slice_ = max(0, min(WAIT_SLICE, int(deadline - time.monotonic())))
            approval = await self.call(
                "approval_get", approval_id=approval["id"], wait_seconds=slice_
            )
            print(f"approval {approval['id']} is {approval['status']}")
        if approval["status"] == "committed":
            print(f"committed: {gate} is at version {approval['commit']['version']}")
        elif approval["status"] == "rejected":
            print(f"rejected: {approval.get('reason') or '(no reason given)'}")
        return approval


def do(task_id: str, task: dict[str, Any], agent_id: str) -> dict[str, Any]:
    """The work itself; here, square the task's number."""
    n = task.get("n", 0)
    return {"by": agent_id, "n": n, "square": n * n if isinstance(n, int) else None}


async def run(args: argparse.Namespace) -> int:
    headers = {"X-API-Key": args.key}
    if args.agent:
        headers["X-Agent-Id"] = args.agent
    async with (
        httpx2.AsyncClient(headers=headers, timeout=WAIT_SLICE + 20) as http,
        Client(streamable_http_client(f"{args.url.rstrip('/')}/mcp", http_client=http)) as client,
    ):
        agent = Agent(client, args.agent)
        tools = await client.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools.tools))
        if args.setup:
            queue = {f"t{i:03d}": {"status": "pending", "n": i} for i in range(1, args.setup + 1)}
            await agent.ensure_shard(args.queue, queue)
            await agent.ensure_shard(args.results, {})
            await agent.ensure_shard(args.gate, {"published": False}, reversible=False)
        summary: dict[str, Any] = {"agent": args.agent}
        try:
            summary["claimed"] = await agent.claim_all(args.queue, args.results)
            summary["stale_retries"] = agent.stale_retries
            if not args.no_approval:
                approval = await agent.publish(args.gate, args.results, args.wait)
                summary["approval"] = {
                    "id": approval["id"],
                    "status": approval["status"],
                    "commit": approval.get("commit"),
                }
        except Refused as refused:
            print(f"refused: {refused}", file=sys.stderr)
            summary["error"] = refused.error
            print(json.dumps(summary), flush=True)
            return 2
        print(json.dumps(summary), flush=True)
        status = summary.get("approval", {}).get("status", "committed")
        return 0 if status == "committed" else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("ZEROLOCK_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--key", default=os.environ.get("ZEROLOCK_API_KEY", ""))
    parser.add_argument("--agent", default=os.environ.get("ZEROLOCK_AGENT_ID", "mcp-worker-1"))
    parser.add_argument("--queue", default="example.mcp.tasks", help="the task-queue shard")
    parser.add_argument("--results", default="example.mcp.results", help="the results shard")
    parser.add_argument(
        "--gate", default="example.mcp.published", help="the irreversible shard to publish to"
    )
    parser.add_argument(
        "--setup",
        type=int,
        default=0,
        metavar="N",
        help="first create the three shards (a queue of N tasks) if missing",
    )
    parser.add_argument(
        "--wait", type=float, default=600, help="seconds to wait for the approval's decision"
    )
    parser.add_argument("--no-approval", action="store_true", help="only claim and write results")
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("no key: set ZEROLOCK_API_KEY or pass --key")
    return args


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
