"""The reference design's scenarios in one command, against a live server.

Run by hand: ``.venv/bin/python bench/harness.py [--db sqlite|postgres]``.
Prints a table, writes JSON and (with matplotlib) a PNG to bench/results/.

lost-updates      50 agents x 10 read-increment-write on one counter: naive
                  (a last-writer-wins register: an additive map key) vs OCC
                  (a decision shard, retrying on 409).
duplicate-claims  50 agents claim 100 tasks: on an additive map (read, write
                  your name, believe the merged state your write returned) vs
                  on a decision shard with one transaction per claim.
claim-attempts    requests per task for 100 tasks at 5, 50, 80 agents
                  (write-wait-reread vs txn; bench/claims.py).
appenders         80 concurrent appenders x 20 items: lost or duplicated items.
approval-bypass   every way around an approval gate: all must be refused.
byzantine         forged versions, impersonated agent ids, replayed approvals,
                  a flood: all must be refused.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claims import run as claims_run  # noqa: E402
from run import log, manage, running_server  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def client(url: str, key: str, agent: str, **kw: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, headers={"X-API-Key": key, "X-Agent-Id": agent}, timeout=60, **kw
    )


async def lost_updates(url: str, key: str, agents: int = 50, rounds: int = 10) -> list[dict]:
    async with client(url, key, "setup") as c:
        await c.post(
            "/api/shards",
            json={
                "id": "h-naive",
                "type": "additive",
                "crdt_type": "map",
                "initial_value": {"n": 0},
            },
        )
        await c.post("/api/shards", json={"id": "h-occ", "type": "decision", "initial_value": 0})

    async def naive(n: int) -> None:
        async with client(url, key, f"a{n}") as c:
            for _ in range(rounds):
                value = (await c.get("/api/shards/h-naive")).json()["value"]["n"]
                await c.post("/api/shards/h-naive/commit", json={"new_value": {"n": value + 1}})

    async def occ(n: int) -> None:
        async with client(url, key, f"a{n}") as c:
            for _ in range(rounds):
                delay = 0.05
                while True:
                    shard = (await c.get("/api/shards/h-occ")).json()
                    r = await c.post(
                        "/api/shards/h-occ/commit",
                        json={
                            "expected_version": shard["version"],
                            "new_value": shard["value"] + 1,
                        },
                    )
                    if r.status_code == 200:
                        break
                    await asyncio.sleep(random.uniform(0, delay))
                    delay = min(delay * 2, 2.0)

    await asyncio.gather(*(naive(n) for n in range(agents)))
    await asyncio.gather(*(occ(n) for n in range(agents)))
    async with client(url, key, "check") as c:
        naive_value = (await c.get("/api/shards/h-naive")).json()["value"]["n"]
        occ_value = (await c.get("/api/shards/h-occ")).json()["value"]
    expected = agents * rounds
    return [
        {
            "scenario": "lost-updates",
            "variant": "naive (LWW register)",
            "expected": expected,
            "got": naive_value,
            "lost": expected - naive_value,
        },
        {
            "scenario": "lost-updates",
            "variant": "OCC decision shard",
            "expected": expected,
            "got": occ_value,
            "lost": expected - occ_value,
        },
    ]


async def duplicate_claims(url: str, key: str, agents: int = 50) -> list[dict]:
    tasks = [f"t{n:03}" for n in range(100)]
    async with client(url, key, "setup") as c:
        await c.post(
            "/api/shards", json={"id": "h-claims-map", "type": "additive", "crdt_type": "map"}
        )
    believed: Counter = Counter()

    async def map_claimer(n: int) -> None:
        name = f"a{n}"
        async with client(url, key, name) as c:
            for task in random.Random(n).sample(tasks, len(tasks)):
                current = (await c.get("/api/shards/h-claims-map")).json()["value"]
                if task in current:
                    continue
                # A CRDT writer's own replica shows its own write: the merge's
                # answer is what this claimant "sees" right after claiming.
                response = await c.post(
                    "/api/shards/h-claims-map/commit", json={"new_value": {task: name}}
                )
                if response.json()["value"].get(task) == name:
                    believed[task] += 1

    await asyncio.gather(*(map_claimer(n) for n in range(agents)))
    map_duplicates = sum(v - 1 for v in believed.values() if v > 1)
    txn = await claims_run(url, key, "txn", agents)
    return [
        {
            "scenario": "duplicate-claims",
            "variant": "additive map (LWW)",
            "claims_believed": sum(believed.values()),
            "duplicates": map_duplicates,
        },
        {
            "scenario": "duplicate-claims",
            "variant": "decision shard + txn",
            "claims_believed": txn["claimed"],
            "duplicates": txn["duplicates"],
        },
    ]


async def claim_attempts(url: str, key: str) -> list[dict]:
    rows = []
    for agents in (5, 50, 80):
        for method in ("write-wait-reread", "txn"):
            r = await claims_run(url, key, method, agents)
            rows.append(
                {
                    "scenario": "claim-attempts",
                    "variant": method,
                    "agents": agents,
                    "requests_per_task": r["requests_per_task"],
                    "duplicates": r["duplicates"],
                    "claims_per_second": r["claims_per_second"],
                }
            )
    return rows


async def appenders(url: str, key: str, agents: int = 80, items: int = 20) -> list[dict]:
    async with client(url, key, "setup") as c:
        await c.post("/api/shards", json={"id": "h-log", "type": "additive", "crdt_type": "array"})

    async def appender(n: int) -> None:
        async with client(url, key, f"a{n}") as c:
            for i in range(items):
                r = await c.post("/api/shards/h-log/commit", json={"append": [f"{n}:{i}"]})
                r.raise_for_status()

    await asyncio.gather(*(appender(n) for n in range(agents)))
    async with client(url, key, "check") as c:
        value = (await c.get("/api/shards/h-log")).json()["value"]
    counts = Counter(value)
    return [
        {
            "scenario": "appenders",
            "variant": f"{agents} x {items}",
            "expected": agents * items,
            "got": len(value),
            "lost": agents * items - len(set(value)),
            "duplicated": sum(v - 1 for v in counts.values()),
        }
    ]


async def approval_bypass(url: str, admin_key: str, keys: dict[str, str]) -> list[dict]:
    executor, officer = keys["executor"], keys["officer"]
    async with client(url, executor, "executor") as c:
        await c.post(
            "/api/shards",
            json={
                "id": "h-vault",
                "type": "decision",
                "initial_value": {"paid": False},
                "reversible": False,
            },
        )
        await c.post(
            "/api/shards",
            json={"id": "h-other", "type": "decision", "initial_value": 0, "reversible": False},
        )
        approval = (
            await c.post(
                "/api/approvals/request",
                json={
                    "shard_id": "h-vault",
                    "proposed_value": {"paid": True},
                    "expected_version": 1,
                    "description": "pay",
                },
            )
        ).json()
        approval_id = approval["id"]

        async def pay(shard: str = "h-vault", value: Any = None, with_id: str | None = None):
            body: dict[str, Any] = {"expected_version": 1, "new_value": value or {"paid": True}}
            if with_id:
                body["approval_id"] = with_id
            return await c.post(f"/api/shards/{shard}/commit", json=body)

        attempts = {
            "direct commit": await pay(),
            "forged approval id": await pay(with_id="apr_forged"),
            "pending approval": await pay(with_id=approval_id),
            "approval for another shard": await pay("h-other", with_id=approval_id),
            "different value": await pay(value={"paid": "twice"}, with_id=approval_id),
            "self-approval": await c.post(f"/api/approvals/{approval_id}/approve"),
        }
        async with client(url, officer, "officer") as o:
            await o.post(f"/api/approvals/{approval_id}/approve")
        attempts["replayed approval"] = await pay(with_id=approval_id)
    return [
        {
            "scenario": "approval-bypass",
            "variant": name,
            "status": r.status_code,
            "code": r.json()["error"]["code"],
            "refused": r.status_code >= 400,
        }
        for name, r in attempts.items()
    ]


async def byzantine(url: str, keys: dict[str, str]) -> list[dict]:
    rows = []
    async with client(url, keys["executor"], "executor") as c:
        await c.post("/api/shards", json={"id": "h-byz", "type": "decision", "initial_value": 0})
        r = await c.post("/api/shards/h-byz/commit", json={"expected_version": 99, "new_value": 1})
        rows.append(("forged version", r))
    async with client(url, keys["bound"], "impostor") as c:
        r = await c.post("/api/shards/h-byz/commit", json={"expected_version": 1, "new_value": 1})
        rows.append(("impersonated agent id", r))
    async with client(url, keys["flooder"], "flooder") as c:
        statuses = [(await c.get("/api/shards/h-byz")).status_code for _ in range(40)]
        r = await c.get("/api/shards/h-byz")
        rows.append((f"flood ({statuses.count(429)} of 40 refused)", r))
    return [
        {
            "scenario": "byzantine",
            "variant": name,
            "status": r.status_code,
            "code": r.json()["error"]["code"],
            "refused": r.status_code >= 400,
        }
        for name, r in rows
    ]


def manage_key(env: dict[str, str], name: str, *args: str) -> str:
    return manage(env, "createapikey", name, *args).strip().splitlines()[-1].strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    rows: list[dict] = []
    with running_server("uvicorn", args.db, keep_data=False) as server:
        env = server.env
        keys = {
            "executor": manage_key(
                env,
                "executor",
                "--permissions",
                "shard:read,shard:write,shard:create,approval:request",
            ),
            "officer": manage_key(env, "officer", "--permissions", "shard:read,approval:decide"),
            "bound": manage_key(
                env,
                "bound",
                "--permissions",
                "shard:read,shard:write",
                "--agent",
                "the-real-agent",
            ),
            "flooder": manage_key(
                env, "flooder", "--permissions", "shard:read", "--rate-limit", "30"
            ),
        }
        url, key = server.url, server.api_key
        for name, scenario in (
            ("lost-updates", lambda: lost_updates(url, key)),
            ("duplicate-claims", lambda: duplicate_claims(url, key)),
            ("claim-attempts", lambda: claim_attempts(url, key)),
            ("appenders", lambda: appenders(url, key)),
            ("approval-bypass", lambda: approval_bypass(url, key, keys)),
            ("byzantine", lambda: byzantine(url, keys)),
        ):
            if only and name not in only:
                continue
            log(f"scenario {name}")
            found = asyncio.run(scenario())
            for row in found:
                log(f"  {json.dumps(row)}")
            rows += found
    columns = [
        "scenario",
        "variant",
        "agents",
        "expected",
        "got",
        "lost",
        "duplicated",
        "duplicates",
        "claims_believed",
        "requests_per_task",
        "claims_per_second",
        "status",
        "code",
        "refused",
    ]
    used = [c for c in columns if any(c in r for r in rows)]
    print("\n| " + " | ".join(used) + " |\n|" + "---|" * len(used))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in used) + " |")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"harness-{args.db}-{stamp}.json"
    out.write_text(json.dumps(rows, indent=2))
    print(f"\nwrote {out}")
    if plot(rows, RESULTS / f"harness-{args.db}-{stamp}.png"):
        print(f"wrote {RESULTS / f'harness-{args.db}-{stamp}.png'}")
    refused = [r for r in rows if "refused" in r]
    ok = all(r["refused"] for r in refused) and all(
        r.get("lost", 0) == 0 and r.get("duplicates", 0) == 0
        for r in rows
        if r["variant"] in ("OCC decision shard", "decision shard + txn")
        or r["scenario"] == "appenders"
    )
    print("all protections held" if ok else "A PROTECTION FAILED")
    return 0 if ok else 1


def plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # optional
        return False
    attempts = [r for r in rows if r["scenario"] == "claim-attempts"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for method in ("write-wait-reread", "txn"):
        points = [(r["agents"], r["requests_per_task"]) for r in attempts if r["variant"] == method]
        left.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=method)
    left.set_xlabel("agents")
    left.set_ylabel("requests per task")
    left.set_yscale("log")
    left.legend()
    left.set_title("claiming 100 tasks")
    lost = [r for r in rows if r["scenario"] == "lost-updates"]
    right.bar([r["variant"] for r in lost], [r["lost"] for r in lost], color=["#a12a2a", "#1f7a4d"])
    right.set_title("lost updates (50 agents x 10)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


if __name__ == "__main__":
    sys.exit(main())
