"""Claiming 100 tasks: the reference design's write-wait-reread on a decision
shard against one compare-and-set transaction per claim, side by side.

Run by hand: ``.venv/bin/python bench/claims.py [--agents 5,50,80] [--db sqlite]
[--methods write-wait-reread,txn,claim]``.

write-wait-reread: read the queue, commit it with the chosen task marked as
yours (OCC: 409 when anyone changed the queue since the read), wait 50 ms,
re-read to confirm you hold it; on a 409 read again and retry.
txn: POST /api/txn comparing the task's status; the answer carries the queue
either way, so the agent's next pick is fresh (see tests/coordination/test_transactions.py).
claim: POST /api/shards/{id}/claim with ``Prefer: return=minimal``; the server
picks a pending task, so no request loses to another agent's claim; each agent
stops at its first 404 NOTHING_TO_CLAIM (one per agent, counted).
Every request any agent sends is counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import log, running_server  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TASKS = [f"t{n:03}" for n in range(100)]
METHODS = ("write-wait-reread", "txn", "claim")
CLAIM = {"where": {"status": "pending"}, "set": {"status": "claimed"}}


async def make_queue(client: httpx.AsyncClient, shard_id: str) -> None:
    response = await client.post(
        "/api/shards",
        json={
            "id": shard_id,
            "type": "decision",
            "initial_value": {t: {"status": "pending"} for t in TASKS},
        },
        headers={"X-Agent-Id": "boss"},
    )
    response.raise_for_status()


async def reread_worker(client, shard_id, index, agents, requests, claims) -> None:
    name = f"w{index}"
    headers = {"X-Agent-Id": name}
    start = index * len(TASKS) // agents
    order = TASKS[start:] + TASKS[:start]
    while True:
        requests[name] += 1
        shard = (await client.get(f"/api/shards/{shard_id}", headers=headers)).json()
        task = next((t for t in order if shard["value"][t]["status"] == "pending"), None)
        if task is None:
            return
        value = dict(shard["value"])
        value[task] = {"status": "claimed", "holder": name}
        requests[name] += 1
        response = await client.post(
            f"/api/shards/{shard_id}/commit",
            json={"expected_version": shard["version"], "new_value": value},
            headers=headers,
        )
        if response.status_code == 409:
            continue
        await asyncio.sleep(0.05)
        requests[name] += 1
        check = (await client.get(f"/api/shards/{shard_id}", headers=headers)).json()
        if check["value"][task].get("holder") == name:
            claims[task].append(name)


async def txn_worker(client, shard_id, index, agents, requests, claims) -> None:
    name = f"w{index}"
    start = index * len(TASKS) // agents
    order = TASKS[start:] + TASKS[:start]
    taken: set[str] = set()
    while True:
        task = next((t for t in order if t not in taken), None)
        if task is None:
            return
        requests[name] += 1
        body = {
            "compare": [
                {"shard_id": shard_id, "path": [task, "status"], "op": "==", "value": "pending"}
            ],
            "success": [
                {
                    "op": "put",
                    "shard_id": shard_id,
                    "path": [task],
                    "value": {"status": "claimed", "holder": name},
                },
                {"op": "get", "shard_id": shard_id},
            ],
            "failure": [{"op": "get", "shard_id": shard_id}],
        }
        result = (await client.post("/api/txn", json=body, headers={"X-Agent-Id": name})).json()
        if result["succeeded"]:
            claims[task].append(name)
        taken = {t for t, v in result["responses"][-1]["value"].items() if v["status"] != "pending"}


async def claim_worker(client, shard_id, index, agents, requests, claims) -> None:
    name = f"w{index}"
    headers = {"X-Agent-Id": name, "Prefer": "return=minimal"}
    while True:
        requests[name] += 1
        response = await client.post(f"/api/shards/{shard_id}/claim", json=CLAIM, headers=headers)
        if response.status_code == 404 and response.json()["error"]["code"] == "NOTHING_TO_CLAIM":
            return
        response.raise_for_status()
        claims[response.json()["task_id"]].append(name)


WORKERS = {"write-wait-reread": reread_worker, "txn": txn_worker, "claim": claim_worker}


async def run(url: str, key: str, method: str, agents: int) -> dict:
    shard_id = f"bench-{method}-{agents}-{uuid.uuid4().hex[:6]}"
    requests: Counter = Counter()
    claims: dict[str, list[str]] = {t: [] for t in TASKS}
    worker = WORKERS[method]
    limits = httpx.Limits(max_connections=agents, max_keepalive_connections=agents)
    async with httpx.AsyncClient(
        base_url=url, headers={"X-API-Key": key}, timeout=120, limits=limits
    ) as client:
        await make_queue(client, shard_id)
        started = time.perf_counter()
        await asyncio.gather(
            *(worker(client, shard_id, n, agents, requests, claims) for n in range(agents))
        )
        elapsed = time.perf_counter() - started
    claimed = sum(1 for holders in claims.values() if holders)
    sent = sum(requests.values())
    return {
        "method": method,
        "agents": agents,
        "requests": sent,
        "requests_per_task": round(sent / len(TASKS), 2),
        # Requests that claimed nothing: lost races, and each agent's last look
        # at an exhausted queue (for claim, exactly one per agent).
        "unclaiming_requests": sent - sum(len(h) for h in claims.values()),
        "claimed": claimed,
        "duplicates": sum(len(h) - 1 for h in claims.values() if len(h) > 1),
        "seconds": round(elapsed, 2),
        "claims_per_second": round(claimed / elapsed, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite")
    parser.add_argument("--agents", default="5,50,80")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args()
    methods = args.methods.split(",")
    unknown = set(methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    rows = []
    for db in args.db.split(","):
        with running_server("uvicorn", db, keep_data=False) as server:
            for agents in (int(a) for a in args.agents.split(",")):
                for method in methods:
                    log(f"{db}: {method} with {agents} agents")
                    rows.append(
                        {"db": db, **asyncio.run(run(server.url, server.api_key, method, agents))}
                    )
    print(
        "\n| db | method | agents | requests | requests/task | unclaiming | claimed "
        "| duplicates | seconds | claims/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['db']} | {r['method']} | {r['agents']} | {r['requests']} | {r['requests_per_task']} "
            f"| {r['unclaiming_requests']} | {r['claimed']} | {r['duplicates']} | {r['seconds']} "
            f"| {r['claims_per_second']} |"
        )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"claims-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(rows, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
