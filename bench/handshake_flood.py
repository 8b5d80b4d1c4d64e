"""Honest commit throughput with and without a flood of failed WebSocket handshakes
(issue 16, finding 13: 300 failed handshakes a second had slowed commits four-fold).

Starts its own server (bench/run.py's ``running_server``, SQLite by default), then
alternates runs: honest agents committing alone, and the same agents while 2,000
handshakes with a bad key hammer /ws/agents/. Prints the median commits/s of each
and their ratio. Run by hand; not a test:

    .venv/bin/python bench/handshake_flood.py               # the default limits
    .venv/bin/python bench/handshake_flood.py --no-limit    # failures never throttled
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import log, running_server  # noqa: E402


async def honest(url: str, key: str, agents: int, stop: asyncio.Event) -> int:
    async def agent(n: int) -> int:
        shard_id = f"honest-{n}"
        headers = {"X-API-Key": key, "X-Agent-Id": f"honest-{n}"}
        done = 0
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            response = await client.get(f"/api/shards/{shard_id}")
            if response.status_code == 404:
                await client.post(
                    "/api/shards", json={"id": shard_id, "type": "decision", "initial_value": 0}
                )
                response = await client.get(f"/api/shards/{shard_id}")
            version = response.json()["version"]
            while not stop.is_set():
                response = await client.post(
                    f"/api/shards/{shard_id}/commit",
                    json={"expected_version": version, "new_value": version},
                )
                response.raise_for_status()
                version = response.json()["version"]
                done += 1
        return done

    return sum(await asyncio.gather(*(agent(n) for n in range(agents))))


async def flood(
    ws_url: str, count: int, concurrency: int, key: str = "zl_deadbeef.wrong", rate: float = 0
) -> Counter:
    """``count`` handshakes, at most ``concurrency`` at once; ``rate`` > 0 paces
    their starts at that many a second (0: as fast as the client can)."""
    gate = asyncio.Semaphore(concurrency)
    t0 = time.monotonic()

    async def one(i: int) -> str:
        if rate:
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        async with gate:
            try:
                async with websockets.connect(
                    ws_url,
                    additional_headers={"X-API-Key": key},
                    open_timeout=30,
                    ping_interval=None,
                ) as socket:
                    if key.endswith(".wrong"):
                        await socket.recv()
                        await socket.wait_closed()
                        return str(socket.close_code)
                    return "opened"
            except websockets.InvalidStatus as refused:
                return str(refused.response.status_code)
            except (websockets.InvalidMessage, OSError):
                return "dropped"

    return Counter(await asyncio.gather(*(one(i) for i in range(count))))


def run_flood_process(url: str, count: int, key: str, rate: float = 0) -> str:
    code = (
        "import asyncio, sys; sys.path.insert(0, 'bench'); import handshake_flood as h; "
        f"print(dict(asyncio.run(h.flood({url.replace('http', 'ws') + '/ws/agents/'!r}, "
        f"{count}, 50, {key!r}, {rate!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return done.stdout.strip()


async def measure(
    url: str, key: str, *, with_flood: bool, seconds: float, args, flood_key: str | None = None
) -> float:
    stop = asyncio.Event()
    started = time.monotonic()
    commits = asyncio.create_task(honest(url, key, args.agents, stop))
    if with_flood:
        # In its own process: a flood client in this loop would starve the honest
        # agents here and measure the client, not the server.
        outcomes = await asyncio.to_thread(
            run_flood_process,
            url,
            args.count,
            "zl_deadbeef.wrong" if flood_key is None else flood_key,
            args.rate,
        )
        log(f"  flood outcomes {outcomes}")
    else:
        await asyncio.sleep(seconds)
    stop.set()
    done = await commits
    return done / (time.monotonic() - started)


async def main_async(url: str, key: str, args) -> None:
    base, flooded, control, keyless = [], [], [], []
    for run in range(args.runs):
        flooded.append(await measure(url, key, with_flood=True, seconds=0, args=args))
        base.append(await measure(url, key, with_flood=False, seconds=args.seconds, args=args))
        # Control: as many handshakes with a VALID key. What they cost is the price
        # of any WebSocket traffic on this machine, not of failures.
        control.append(
            await measure(url, key, with_flood=True, seconds=0, args=args, flood_key=key)
        )
        # Floor: handshakes with no key at all, refused (HTTP 403) before any
        # database work: what the server stack charges for a connection it refuses.
        keyless.append(await measure(url, key, with_flood=True, seconds=0, args=args, flood_key=""))
        log(
            f"run {run + 1}: alone {base[-1]:.0f} commits/s, under failed handshakes "
            f"{flooded[-1]:.0f}, under valid handshakes {control[-1]:.0f}, under keyless "
            f"handshakes {keyless[-1]:.0f}"
        )
    b, f, c, k = (statistics.median(x) for x in (base, flooded, control, keyless))
    n = args.count
    print(
        f"| honest commits/s alone (median) | under {n} failed handshakes | ratio "
        f"| under {n} valid handshakes | ratio | under {n} keyless (403) | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    print(f"| {b:.0f} | {f:.0f} | {f / b:.2f} | {c:.0f} | {c / b:.2f} | {k:.0f} | {k / b:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default="sqlite", choices=("sqlite", "postgres"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a run alone")
    parser.add_argument("--no-limit", action="store_true", help="never throttle failures")
    parser.add_argument("--server", default="uvicorn", choices=("uvicorn", "daphne"))
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="handshakes started per second (0: as fast as the flood client can; the "
        "finding was 300/s)",
    )
    args = parser.parse_args()
    if args.no_limit:
        os.environ["ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE"] = "100000000"
    with running_server(args.server, args.db, keep_data=False) as server:
        asyncio.run(main_async(server.url, server.api_key, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
