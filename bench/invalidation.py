"""Invalidation latency and the cost of scoped pushes, against a live server.

Run by hand: ``.venv/bin/python bench/invalidation.py [--db sqlite,postgres]``.

latency:  N subscribers on one shard; one agent commits to it M times, one at a
          time; each subscriber timestamps its ``invalidate``. Latency is from
          just before the commit request to the push's arrival (so it includes
          the commit itself), over every (subscriber, commit) pair. The
          server's own figure (/api/metrics/ws ``push_delay_ms``) times each
          change from its commit to the last frame handed to the socket.
savings:  100 agents, each subscribed to 10 of 100 shards; 300 commits spread
          over the shards; /api/metrics/ws before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import log, percentile_ms, running_server  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


async def connect(ws_url: str, key: str, agent: str, shard_ids: list[str]):
    socket = await websockets.connect(
        ws_url, additional_headers={"X-API-Key": key, "X-Agent-Id": agent}, max_queue=None
    )
    await socket.send(json.dumps({"type": "subscribe", "shard_ids": shard_ids}))
    assert json.loads(await socket.recv())["type"] == "subscribed"
    return socket


async def latency(url: str, key: str, subscribers: int, commits: int) -> dict:
    ws_url = url.replace("http://", "ws://") + "/ws/agents/"
    headers = {"X-API-Key": key, "X-Agent-Id": "committer"}
    shard_id = f"bench-hot-{subscribers}"
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        await client.post(
            "/api/shards", json={"id": shard_id, "type": "decision", "initial_value": 0}
        )
        sockets = [await connect(ws_url, key, f"sub-{n}", [shard_id]) for n in range(subscribers)]
        arrivals: dict[int, list[float]] = {}

        async def listen(socket) -> None:
            async for message in socket:
                event = json.loads(message)
                arrivals.setdefault(event["version"], []).append(time.perf_counter())

        listeners = [asyncio.create_task(listen(s)) for s in sockets]
        before = await server_delays(client)
        sent_at: dict[int, float] = {}
        for version in range(1, commits + 1):
            sent_at[version + 1] = time.perf_counter()
            response = await client.post(
                f"/api/shards/{shard_id}/commit",
                json={"expected_version": version, "new_value": version},
            )
            response.raise_for_status()
            deadline = time.perf_counter() + 10
            while (
                len(arrivals.get(version + 1, ())) < subscribers and time.perf_counter() < deadline
            ):
                await asyncio.sleep(0.001)
        # The counters are written behind (every 0.5 s): wait for all of them.
        deadline = time.perf_counter() + 10
        while (
            sum((after := await server_delays(client)).values()) - sum(before.values()) < commits
            and time.perf_counter() < deadline
        ):
            await asyncio.sleep(0.2)
        for task in listeners:
            task.cancel()
        for socket in sockets:
            await socket.close()
    server = {b: after[b] - before[b] for b in after}
    samples = [at - sent_at[v] for v, ats in arrivals.items() for at in ats]
    lost = subscribers * commits - len(samples)
    return {
        "subscribers": subscribers,
        "commits": commits,
        "deliveries": len(samples),
        "lost": lost,
        "p50_ms": round(percentile_ms(samples, 50), 2),
        "p99_ms": round(percentile_ms(samples, 99), 2),
        "max_ms": round(max(samples) * 1000, 2),
        "mean_ms": round(statistics.mean(samples) * 1000, 2),
        # Inside the server: commit to the last frame handed to the socket, per change.
        "server_fanouts": sum(server.values()),
        "server_p50_ms": bucket_bound(server, 50),
        "server_p99_ms": bucket_bound(server, 99),
        "server_within_20ms_percent": round(
            100
            * sum(n for b, n in server.items() if b != "over" and int(b) <= 20)
            / max(1, sum(server.values())),
            2,
        ),
    }


async def server_delays(client: httpx.AsyncClient) -> dict[str, int]:
    return (await client.get("/api/metrics/ws")).json()["push_delay_ms"]["buckets"]


def bucket_bound(buckets: dict[str, int], p: float) -> str:
    """The upper bound (ms) of the bucket holding the p-th percentile, as "≤ N"."""
    total, seen = sum(buckets.values()), 0
    for bound, n in buckets.items():
        seen += n
        if total and seen >= p / 100 * total:
            return f"≤ {bound}" if bound != "over" else "> 1000"
    return "-"


async def savings(
    url: str, key: str, agents: int = 100, shards: int = 100, commits: int = 300
) -> dict:
    ws_url = url.replace("http://", "ws://") + "/ws/agents/"
    rng = random.Random(11)
    ids = [f"bench-s{n:03}" for n in range(shards)]
    headers = {"X-API-Key": key, "X-Agent-Id": "committer"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        for shard_id in ids:
            await client.post(
                "/api/shards", json={"id": shard_id, "type": "decision", "initial_value": 0}
            )
        sockets = [
            await connect(ws_url, key, f"agent-{n}", rng.sample(ids, 10)) for n in range(agents)
        ]
        await asyncio.sleep(1.5)
        before = (await client.get("/api/metrics/ws")).json()
        versions = dict.fromkeys(ids, 1)
        for _ in range(commits):
            shard_id = rng.choice(ids)
            await client.post(
                f"/api/shards/{shard_id}/commit",
                json={"expected_version": versions[shard_id], "new_value": 1},
            )
            versions[shard_id] += 1
        await asyncio.sleep(2)
        after = (await client.get("/api/metrics/ws")).json()
        for socket in sockets:
            await socket.close()
    sent = after["messages_sent"] - before["messages_sent"]
    naive = after["naive_broadcast_messages"] - before["naive_broadcast_messages"]
    return {
        "agents": agents,
        "commits": commits,
        "messages_sent": sent,
        "naive_broadcast_messages": naive,
        "cost_savings_percent": round(100 * (1 - sent / naive), 2) if naive else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="sqlite,postgres")
    parser.add_argument("--subscribers", default="1,50,200")
    parser.add_argument("--commits", type=int, default=100)
    args = parser.parse_args()
    rows, saved = [], []
    for db in args.db.split(","):
        with running_server("uvicorn", db, keep_data=False) as server:
            for n in (int(x) for x in args.subscribers.split(",")):
                log(f"{db}: latency with {n} subscribers")
                rows.append(
                    {"db": db, **asyncio.run(latency(server.url, server.api_key, n, args.commits))}
                )
            log(f"{db}: savings at 100 agents")
            saved.append({"db": db, **asyncio.run(savings(server.url, server.api_key))})
    print(
        "\n| db | subscribers | commits | deliveries | lost | p50 ms | p99 ms | max ms"
        " | server p50 ms | server p99 ms | server ≤ 20 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['db']} | {r['subscribers']} | {r['commits']} | {r['deliveries']} | {r['lost']} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']}"
            f" | {r['server_p50_ms']} | {r['server_p99_ms']} | {r['server_within_20ms_percent']} % |"
        )
    print("\n| db | agents | commits | sent | naive broadcast | savings % |")
    print("|---|---|---|---|---|---|")
    for s in saved:
        print(
            f"| {s['db']} | {s['agents']} | {s['commits']} | {s['messages_sent']} | {s['naive_broadcast_messages']} | {s['cost_savings_percent']} |"
        )
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"invalidation-{stamp}.json"
    out.write_text(json.dumps({"latency": rows, "savings": saved}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
