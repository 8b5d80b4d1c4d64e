"""Where a request's time goes: one endpoint under load, sampled with py-spy.

Run by hand (not a test):

    .venv/bin/python bench/profile.py get --seconds 15 --threads 8
    .venv/bin/python bench/profile.py commit --db postgres

Starts the web server (``--server``, uvicorn by default as in `make run`) on a throwaway data dir
(like bench/run.py), loads one endpoint
from ``--threads`` client threads (each on its own decision shard), samples the
server with ``py-spy record`` at 200 Hz for the whole run, and prints the
request rate, p50/p99, and the functions that hold the most samples (inclusive),
filtered to ZeroLock's own code and the layers it sits on. The raw collapsed
stacks stay in ``bench/results/profile-<mode>-<db>-<UTC>.txt`` for flame graphs
(e.g. ``flamegraph.pl`` or speedscope).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import RESULTS_DIR as RESULTS  # noqa: E402
from run import VENV_BIN, running_server  # noqa: E402

SKIP = (
    "threading.py",
    "twisted/",
    "asyncio/",
    "runpy",
    "daphne/",
    "uvicorn/",
    "concurrent/futures",
)


def summary(raw: Path, top: int) -> list[tuple[float, str]]:
    """Inclusive share of samples per function (each counted once per stack)."""
    total = 0
    inclusive: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        seen = set()
        for frame in stack.split(";"):
            name, _, where = frame.partition(" (")
            where = where.split(":")[0].split("site-packages/")[-1].replace(str(ROOT) + "/", "")
            label = f"{name} ({where})"
            if label not in seen:
                seen.add(label)
                inclusive[label] += n
    rows = [
        (100 * v / total, k) for k, v in inclusive.most_common() if not any(s in k for s in SKIP)
    ]
    return rows[:top]


ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("mode", choices=["get", "commit", "append"])
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--server", default="uvicorn", choices=["uvicorn", "daphne"])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--one-shard",
        action="store_true",
        help="every thread on shard p0 (as bench/peer.py's appenders share one array)",
    )
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument(
        "--gil",
        action="store_true",
        help="sample only the thread holding the GIL (CPU in Python, not waits)",
    )
    args = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = RESULTS / f"profile-{args.mode}-{args.db}-{stamp}.txt"
    with running_server(args.server, args.db, keep_data=False) as server:
        headers = {"X-API-Key": server.api_key, "X-Agent-Id": "profiler"}
        with httpx.Client(base_url=server.url, headers=headers) as setup:
            for n in range(1 if args.one_shard else args.threads):
                body: dict = {"id": f"p{n}", "type": "decision", "initial_value": {"n": 0}}
                if args.mode == "append":
                    body = {
                        "id": f"p{n}",
                        "type": "additive",
                        "crdt_type": "array",
                        "initial_value": [],
                    }
                setup.post("/api/shards", json=body).raise_for_status()
        spy = subprocess.Popen(
            [
                str(VENV_BIN / "py-spy"),
                "record",
                "-p",
                str(server.proc.pid),
                "-d",
                str(int(args.seconds)),
                "-r",
                str(args.rate),
                "-f",
                "raw",
                "-o",
                str(raw),
                "--subprocesses",
                *(["--gil"] if args.gil else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        counts = [0] * args.threads
        latencies: list[float] = []
        stop = time.monotonic() + args.seconds

        def agent(n: int) -> None:
            shard = "p0" if args.one_shard else f"p{n}"
            with httpx.Client(
                base_url=server.url, headers={**headers, "X-Agent-Id": f"a{n}"}, timeout=60
            ) as c:
                version = c.get(f"/api/shards/{shard}").json()["version"]
                while time.monotonic() < stop:
                    started = time.perf_counter()
                    if args.mode == "get":
                        r = c.get(f"/api/shards/{shard}")
                    elif args.mode == "commit":
                        r = c.post(
                            f"/api/shards/{shard}/commit",
                            json={"expected_version": version, "new_value": {"n": version}},
                        )
                        version = r.json().get("version", version)
                    else:
                        r = c.post(
                            f"/api/shards/{shard}/commit",
                            json={"append": [version]},
                            headers={"Prefer": "return=minimal"},
                        )
                    r.raise_for_status()
                    latencies.append(time.perf_counter() - started)
                    counts[n] += 1

        threads = [threading.Thread(target=agent, args=(n,)) for n in range(args.threads)]
        began = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - began
        spy.wait()
    latencies.sort()
    print(
        f"{args.mode} on {args.db}, {args.threads} threads: {sum(counts) / elapsed:.0f} req/s, "
        f"p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, p99 {latencies[int(len(latencies) * 0.99)] * 1000:.1f} ms"
    )
    if raw.exists():
        print(f"\nInclusive share of server samples ({raw.name}):")
        for share, label in summary(raw, args.top):
            print(f"{share:5.1f}%  {label}")


if __name__ == "__main__":
    main()
