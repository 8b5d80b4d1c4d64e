"""Soak: the server as `make run` starts it (bin/serve), under mixed traffic from many
agents for minutes, with its Celery worker killed (-9) along the way.

Run by hand (a benchmark, not a test):
    .venv/bin/python bench/soak.py                          # 80 agents, 600 s, 2 kills,
                                                            # and the hostile mix below
    .venv/bin/python bench/soak.py --duration 60 --agents 20  # smoke run
    DATABASE_URL=postgres://... REDIS_URL=redis://... .venv/bin/python bench/soak.py

On top of the agents runs the hostile mix of the hardening probe: watchers that
stop reading (--slow-readers), connections that never finish a head
(--half-open), transactions of 100 gets of a 500 KB shard (--big-txns).

It ends with three verdicts: 0 lost acknowledged writes (every 200 commit's version is
in /history with its value; every acknowledged append item is in the array exactly
once), `manage.py verify_audit` intact, and whether the server's memory levels off.
bin/serve is a black box: the worker is found in its process tree. If the whole
server goes down, it is started again on the same data for the checks (and the run
says so).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proctree import alive, children_of, cmdline, rss_mb  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
RESULTS = Path(__file__).resolve().parent / "results"
# How bin/serve's web process shows in its command line, whichever server it runs.
WEB_COMMANDS = ("zerolock_site.uvicorn_server", "zerolock_site.daphne_server")
DECISION_SHARDS, ADDITIVE_SHARDS, VAULTS = 20, 5, 5


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------- processes


def celery_pids(serve_pid: int) -> set[int]:
    """Every live Celery worker process under bin/serve (a zombie has no cmdline)."""
    return {p for p in children_of(serve_pid) if "celery" in cmdline(p) and " worker" in cmdline(p)}


def worker_pids(serve_pid: int) -> list[int]:
    """The Celery worker's main processes (not its pool or beat children): a celery
    process whose parent is not itself a celery process."""
    celery = celery_pids(serve_pid)
    main = []
    for pid in celery:
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid not in celery:
            main.append(pid)
    return sorted(main)


class Serve:
    """bin/serve on a port and data dir, in its own process group."""

    def __init__(self, env: dict[str, str], port: int, log_path: Path) -> None:
        self.env, self.port, self.log_path = env, port, log_path
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        out = open(self.log_path, "ab")  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen(
            ["bin/serve"],
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/api/health", timeout=3).status_code in (200, 503):
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"bin/serve did not start; see {self.log_path}")
            time.sleep(0.3)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> dict:
        """Ctrl-C, as a user would; then whatever is left of the tree is reported and
        ended, so no worker outlives the run (finding 15: a worker hung on Ctrl-C)."""
        if self.proc is None or self.proc.poll() is not None:
            return {}
        tree = [self.proc.pid, *children_of(self.proc.pid)]
        started = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        while time.monotonic() - started < 10 and any(alive(p) for p in tree):
            time.sleep(0.2)
        survivors = [f"{p} {cmdline(p)[:80]}" for p in tree if alive(p)]
        for pid in tree:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait()
        return {"seconds": round(time.monotonic() - started, 1), "left_after_10_s": survivors}

    def rss(self) -> dict[str, float]:
        if not self.alive():
            return {"total": 0.0, "web": 0.0}
        pids = [self.proc.pid, *children_of(self.proc.pid)]
        web = sum(rss_mb(p) for p in pids if any(web in cmdline(p) for web in WEB_COMMANDS))
        return {"total": sum(rss_mb(p) for p in pids), "web": web}


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


# --------------------------------------------------------------------- traffic


@dataclass
class Ledger:
    """What the server acknowledged, to check against what it kept."""

    commits: list[tuple[str, int, Any]] = field(default_factory=list)  # shard, version, value
    appends: dict[str, list[str]] = field(default_factory=dict)  # shard -> items
    counts: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    first_errors: dict[str, str] = field(default_factory=dict)
    invalidations: int = 0
    server_gone: float | None = None  # when bin/serve exited during the run
    # --array-cap: an array with this many acknowledged items takes no more, so
    # the data stops growing and what memory still does is the server's own.
    array_cap: int = 0

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        self.first_errors.setdefault(kind, detail[:300])


async def agent(
    n: int, client: httpx.AsyncClient, approver: httpx.AsyncClient, stop: float, led: Ledger
) -> None:
    rng = random.Random(n)
    name = f"agent-{n:03}"
    headers = {"X-Agent-Id": name}
    seq = 0
    while time.monotonic() < stop and not led.server_gone:
        seq += 1
        roll = rng.random()
        try:
            shard = f"soak-a-{rng.randrange(ADDITIVE_SHARDS)}"
            full = led.array_cap and len(led.appends.get(shard, ())) >= led.array_cap
            if roll < 0.55 or (full and roll < 0.95):
                await decision_step(
                    client, headers, f"soak-d-{rng.randrange(DECISION_SHARDS)}", name, seq, led
                )
            elif roll < 0.95:
                item = f"{name}-{seq}"
                r = await client.post(
                    f"/api/shards/{shard}/commit", json={"append": [item]}, headers=headers
                )
                if r.status_code == 200:
                    led.appends.setdefault(shard, []).append(item)
                    led.counts["append"] += 1
                else:
                    led.error(f"append {r.status_code}", r.text)
            else:
                await approval_step(
                    client, approver, headers, f"soak-vault-{n % VAULTS}", name, seq, led
                )
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            led.error(type(exc).__name__, repr(exc))
            await asyncio.sleep(0.5)  # the server may be restarting


async def decision_step(client, headers, shard: str, name: str, seq: int, led: Ledger) -> None:
    r = await client.get(f"/api/shards/{shard}", headers=headers)
    if r.status_code != 200:
        led.error(f"read {r.status_code}", r.text)
        return
    led.counts["read"] += 1
    value = {"by": name, "seq": seq}
    r = await client.post(
        f"/api/shards/{shard}/commit",
        json={"expected_version": r.json()["version"], "new_value": value},
        headers=headers,
    )
    if r.status_code == 200:
        led.commits.append((shard, r.json()["version"], value))
        led.counts["commit"] += 1
    elif r.status_code == 409:
        led.counts["conflict"] += 1
    else:
        led.error(f"commit {r.status_code}", r.text)


async def approval_step(client, approver, headers, shard: str, name: str, seq: int, led: Ledger):
    current = await client.get(f"/api/shards/{shard}", headers=headers)
    if current.status_code != 200:
        led.error(f"vault read {current.status_code}", current.text)
        return
    value = {"paid_by": name, "seq": seq}
    r = await client.post(
        "/api/approvals/request",
        json={
            "shard_id": shard,
            "proposed_value": value,
            "expected_version": current.json()["version"],
            "description": f"soak {name} {seq}",
            "ttl_seconds": 600,
        },
        headers=headers,
    )
    if r.status_code != 201:
        led.error(f"approval request {r.status_code}", r.text)
        return
    led.counts["approval_request"] += 1
    decided = await approver.post(
        f"/api/approvals/{r.json()['id']}/approve",
        json={"reason": "soak"},
        headers={"X-Agent-Id": "soak-approver"},
    )
    if decided.status_code != 200:
        if decided.status_code != 409:
            led.error(f"approve {decided.status_code}", decided.text)
        return
    led.counts["approved"] += 1
    commit = decided.json().get("commit")
    if decided.json().get("status") == "committed" and commit:
        led.commits.append((shard, commit["version"], value))
        led.counts["approval_commit"] += 1


async def subscriber(ws_url: str, key: str, n: int, stop: float, led: Ledger) -> None:
    shards = [f"soak-d-{i}" for i in range(n % 4, DECISION_SHARDS, 4)]
    while time.monotonic() < stop and not led.server_gone:
        try:
            async with websockets.connect(
                ws_url, additional_headers={"X-API-Key": key, "X-Agent-Id": f"watcher-{n}"}
            ) as ws:
                await ws.send(json.dumps({"type": "subscribe", "shard_ids": shards}))
                led.counts["subscribed"] += 1
                while time.monotonic() < stop and not led.server_gone:
                    with contextlib.suppress(TimeoutError):
                        message = json.loads(await asyncio.wait_for(ws.recv(), timeout=1))
                        if message.get("type") == "invalidate":
                            led.invalidations += 1
        except (OSError, websockets.WebSocketException) as exc:
            led.error("ws", repr(exc))
            await asyncio.sleep(1)


# --------------------------------------------------------------------- the hostile mix
# What the hardening probe used against one user's server, kept up all run long:
# watchers that stop reading, connections that never finish a head, and
# transactions that ask for far more than they send. None of it may cost an
# agent a write, stall health, or make memory climb.

BIG_SHARD = "soak-big"
BIG_VALUE = {"blob": "x" * 500_000}


async def slow_reader(port: int, key: str, n: int, stop: float, led: Ledger) -> None:
    """An SSE watch from the first revision that reads nothing, reopened every 30 s."""
    while time.monotonic() < stop and not led.server_gone:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            head = (
                f"GET /api/watch?prefix=soak-&since=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"X-API-Key: {key}\r\n\r\n"
            )
            await asyncio.get_running_loop().sock_sendall(sock, head.encode())
            led.counts["slow_reader_opened"] += 1
            await asyncio.sleep(min(30.0, max(0.0, stop - time.monotonic())))
        except OSError as exc:
            led.error("slow_reader", repr(exc))
            await asyncio.sleep(1)
        finally:
            sock.close()


async def half_open(port: int, n: int, stop: float, led: Ledger) -> None:
    """A head that never ends: a byte a second until the server lets it go."""
    while time.monotonic() < stop and not led.server_gone:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            led.error("half_open connect", repr(exc))
            await asyncio.sleep(1)
            continue
        try:
            writer.write(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            answer = b""
            while time.monotonic() < stop:
                with contextlib.suppress(TimeoutError):
                    data = await asyncio.wait_for(reader.read(4096), timeout=1)
                    if not data:
                        break
                    answer += data
                writer.write(b"a")
                await writer.drain()
            if answer.startswith(b"HTTP/1.1 408"):
                led.counts["half_open_408"] += 1
            elif time.monotonic() < stop:
                led.error("half_open answer", answer[:80].decode("latin1") or "closed, no answer")
        except (OSError, ConnectionError):
            led.counts["half_open_closed"] += 1
        finally:
            writer.close()


async def big_transactions(client: httpx.AsyncClient, n: int, stop: float, led: Ledger) -> None:
    """100 gets of a 500 KB shard in a 4 KB request, over and over."""
    body = {"success": [{"op": "get", "shard_id": BIG_SHARD} for _ in range(100)]}
    headers = {"X-Agent-Id": f"hoarder-{n}"}
    while time.monotonic() < stop and not led.server_gone:
        try:
            r = await client.post("/api/txn", json=body, headers=headers)
            if r.status_code == 200:
                led.counts["big_txn"] += 1
                led.counts["big_txn_bytes_max"] = max(
                    led.counts["big_txn_bytes_max"], len(r.content)
                )
            else:
                led.error(f"big_txn {r.status_code}", r.text)
        except httpx.HTTPError as exc:
            led.error("big_txn", repr(exc))
            await asyncio.sleep(1)


async def sampler(
    serve: Serve, stop: float, every: float, samples: list[dict], led: Ledger
) -> None:
    async with httpx.AsyncClient(base_url=serve.url, timeout=10) as client:
        while time.monotonic() < stop and not led.server_gone:
            started = time.monotonic()
            if not serve.alive():
                led.server_gone = started
                log("bin/serve exited: the run stops here")
                break
            try:
                r = await client.get("/api/health")
                health: Any = r.status_code
            except httpx.TransportError as exc:
                health = type(exc).__name__
            samples.append(
                {
                    "t": round(time.monotonic(), 2),
                    "health": health,
                    "health_ms": round((time.monotonic() - started) * 1000),
                    "workers": worker_pids(serve.proc.pid) if serve.alive() else [],
                    **{f"rss_{k}_mb": round(v, 1) for k, v in serve.rss().items()},
                }
            )
            await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))


async def killer(serve: Serve, at: list[float], kills: list[dict], led: Ledger) -> None:
    for when in at:
        while time.monotonic() < when and not led.server_gone:
            await asyncio.sleep(min(1.0, when - time.monotonic()))
        if led.server_gone:
            return
        pids = worker_pids(serve.proc.pid) if serve.alive() else []
        if not pids:
            kills.append({"t": round(time.monotonic(), 2), "killed": None, "note": "no worker"})
            continue
        before = celery_pids(serve.proc.pid)  # the old worker's children are not new
        orphans = children_of(pids[0])
        os.kill(pids[0], signal.SIGKILL)
        log(f"kill -9 Celery worker {pids[0]}")
        kill = {"t": round(time.monotonic(), 2), "killed": pids[0], "new_worker_after_s": None}
        kills.append(kill)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and serve.alive():
            fresh = [p for p in worker_pids(serve.proc.pid) if p not in before]
            if fresh:
                kill["new_worker_after_s"] = round(time.monotonic() - kill["t"], 1)
                break
            await asyncio.sleep(0.5)
        kill["server_alive"] = serve.alive()
        # Its pool and embedded beat outliving it would be a second beat (finding 4).
        kill["children_left_after"] = [f"{p} {cmdline(p)[:60]}" for p in orphans if alive(p)]
        kill["orphan_pids"] = orphans
        if not serve.alive() and not led.server_gone:
            led.server_gone = time.monotonic()
            log("bin/serve exited after the kill: the run stops here")


async def drive(serve: Serve, key: str, approver_key: str, args, kills: list[dict]) -> dict:
    led, samples = Ledger(array_cap=args.array_cap), []
    start = time.monotonic()
    stop = start + args.duration
    limits = httpx.Limits(max_connections=args.agents + 10)
    async with (
        httpx.AsyncClient(
            base_url=serve.url, headers={"X-API-Key": key}, timeout=30, limits=limits
        ) as client,
        httpx.AsyncClient(
            base_url=serve.url, headers={"X-API-Key": approver_key}, timeout=30
        ) as approver,
    ):
        ws_url = serve.url.replace("http://", "ws://") + "/ws/agents/"
        kill_at = [start + args.duration * (i + 1) / (args.kills + 1) for i in range(args.kills)]
        tasks = [agent(n, client, approver, stop, led) for n in range(args.agents)]
        tasks += [subscriber(ws_url, key, n, stop, led) for n in range(args.subscribers)]
        tasks += [slow_reader(serve.port, key, n, stop, led) for n in range(args.slow_readers)]
        tasks += [half_open(serve.port, n, stop, led) for n in range(args.half_open)]
        tasks += [big_transactions(client, n, stop, led) for n in range(args.big_txns)]
        tasks += [
            sampler(serve, stop, args.sample_every, samples, led),
            killer(serve, kill_at, kills, led),
        ]
        await asyncio.gather(*tasks)
    return {"ledger": led, "samples": samples, "kills": kills, "seconds": time.monotonic() - start}


def seed_shards(url: str, key: str) -> None:
    shards = [
        {"id": f"soak-d-{n}", "type": "decision", "initial_value": {}}
        for n in range(DECISION_SHARDS)
    ]
    shards += [
        {"id": f"soak-a-{n}", "type": "additive", "crdt_type": "array", "initial_value": []}
        for n in range(ADDITIVE_SHARDS)
    ]
    shards += [
        {"id": f"soak-vault-{n}", "type": "decision", "initial_value": {}, "reversible": False}
        for n in range(VAULTS)
    ]
    shards.append({"id": BIG_SHARD, "type": "decision", "initial_value": BIG_VALUE})
    headers = {"X-API-Key": key, "X-Agent-Id": "soak-setup"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for body in shards:
            r = client.post("/api/shards", json=body)
            if r.status_code != 201:
                raise SystemExit(f"could not create {body['id']}: {r.status_code} {r.text}")


# --------------------------------------------------------------------- checks


def check_writes(url: str, key: str, led: Ledger) -> dict:
    lost, wrong, dup, missing = [], [], [], []
    with httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=120) as client:
        history: dict[str, dict[int, Any]] = {}
        for shard, version, value in led.commits:
            if shard not in history:
                entries = client.get(f"/api/shards/{shard}/history").json()
                history[shard] = {e["version"]: e.get("value") for e in entries}
            if version not in history[shard]:
                lost.append((shard, version))
            elif history[shard][version] != value:
                wrong.append((shard, version))
        for shard, items in led.appends.items():
            kept = Counter(client.get(f"/api/shards/{shard}").json()["value"])
            missing += [(shard, i) for i in items if kept[i] == 0]
            dup += [(shard, i) for i in items if kept[i] > 1]
    return {
        "acknowledged_commits": len(led.commits),
        "acknowledged_appends": sum(len(v) for v in led.appends.values()),
        "commits_lost": len(lost),
        "commits_with_other_value": len(wrong),
        "appends_missing": len(missing),
        "appends_duplicated": len(dup),
        "examples": {"lost": lost[:5], "wrong": wrong[:5], "missing": missing[:5], "dup": dup[:5]},
    }


def slope_mb_per_min(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return None
    return round(sum((t - mx) * (v - my) for t, v in points) / var * 60, 2)


def memory_verdict(samples: list[dict], key: str) -> dict:
    points = [(s["t"], s[key]) for s in samples if s[key] > 0]
    half = len(points) // 2
    first, second = slope_mb_per_min(points[:half]), slope_mb_per_min(points[half:])
    levels_off = None
    if first is not None and second is not None:
        # Flat enough: the second half grows under 1 MB/min or at most half as fast.
        levels_off = second <= max(1.0, first / 2)
    return {
        "start_mb": points[0][1] if points else None,
        "peak_mb": max((v for _, v in points), default=None),
        "end_mb": points[-1][1] if points else None,
        "slope_first_half_mb_per_min": first,
        "slope_second_half_mb_per_min": second,
        "levels_off": levels_off,
    }


# --------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--agents", type=int, default=80)
    parser.add_argument("--subscribers", type=int, default=10)
    parser.add_argument("--kills", type=int, default=2, help="kill -9 of the worker, evenly spaced")
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument(
        "--array-cap",
        type=int,
        default=0,
        help="items per additive array before its appends turn into decision commits "
        "(0: no cap); tells the growth of the data from the server's own",
    )
    parser.add_argument("--slow-readers", type=int, default=20, help="watches that never read")
    parser.add_argument("--half-open", type=int, default=50, help="heads that never end")
    parser.add_argument("--big-txns", type=int, default=4, help="clients asking 100 big gets")
    parser.add_argument("--keep-data", action="store_true")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="zerolock-soak-"))
    env = dict(os.environ)
    env.update(ZEROLOCK_DATA_DIR=str(data_dir), PYTHONPATH=str(ROOT))
    env.setdefault("ZEROLOCK_RATE_LIMIT_PER_MINUTE", "100000000")  # 80 agents, one address
    env.setdefault("ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE", "100000000")
    db = "postgres+redis" if env.get("DATABASE_URL") else "embedded (SQLite, SQLite broker)"
    log(f"{db}; data dir {data_dir}")
    for step in (("migrate", "--noinput"),):
        done = manage(env, *step)
        if done.returncode:
            raise SystemExit(done.stderr)
    key = manage(env, "createapikey", "soak-agents", "--permissions", "admin").stdout.split()[-1]
    approver_key = manage(
        env, "createapikey", "soak-approver", "--permissions", "approval:decide,shard:read"
    ).stdout.split()[-1]
    port = free_port()
    env["PORT"] = str(port)
    serve = Serve(env, port, data_dir / "serve.log")
    serve.start()
    log(f"bin/serve up on {serve.url}; workers {worker_pids(serve.proc.pid)}")
    restarted = False
    run_kills: list[dict] = []
    try:
        seed_shards(serve.url, key)
        log(f"{args.agents} agents for {args.duration:.0f} s, {args.kills} worker kills")
        run = asyncio.run(drive(serve, key, approver_key, args, run_kills))
        if not serve.alive():
            log("bin/serve is gone: starting it again on the same data for the checks")
            restarted = True
            serve.start()
        led: Ledger = run["ledger"]
        writes = check_writes(serve.url, key, led)
    finally:
        stopped = serve.stop()
        for pid in (p for k in run_kills for p in k.get("orphan_pids", [])):
            if alive(pid) and "celery" in cmdline(pid):  # ours, left by a kill -9
                os.kill(pid, signal.SIGKILL)
    audit = manage(env, "verify_audit")
    samples = run["samples"]
    t0 = samples[0]["t"] if samples else 0
    for s in samples:
        s["t"] = round(s["t"] - t0, 1)
    for k in run["kills"]:
        k["t"] = round(k["t"] - t0, 1)
    health_fail = [s for s in samples if s["health"] not in (200, 503)]
    result = {
        "at": datetime.now(UTC).isoformat(),
        "db": db,
        "agents": args.agents,
        "array_cap": args.array_cap,
        "subscribers": args.subscribers,
        "duration_s": round(run["seconds"], 1),
        "counts": dict(led.counts),
        "invalidations_received": led.invalidations,
        "errors": dict(led.errors),
        "first_errors": led.first_errors,
        "kills": run["kills"],
        "server_exited_at_s": round(led.server_gone - t0, 1) if led.server_gone else None,
        "server_restarted_for_checks": restarted,
        "ctrl_c": stopped,
        "writes": writes,
        "verify_audit": {
            "ok": audit.returncode == 0,
            "output": (audit.stdout + audit.stderr)[-500:],
        },
        "health_probes": len(samples),
        "health_probes_unanswered": len(health_fail),
        "health_worst_ms": max((s["health_ms"] for s in samples), default=None),
        "memory_total": memory_verdict(samples, "rss_total_mb"),
        "memory_web": memory_verdict(samples, "rss_web_mb"),
        "samples": samples,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"soak-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    lost = writes["commits_lost"] + writes["commits_with_other_value"]
    lost += writes["appends_missing"] + writes["appends_duplicated"]
    rows = [
        ("database", db),
        (
            "agents / subscribers / seconds",
            f"{args.agents} / {args.subscribers} / {result['duration_s']}",
        ),
        (
            "reads / commits / conflicts",
            f"{led.counts['read']} / {led.counts['commit']} / {led.counts['conflict']}",
        ),
        ("appends acknowledged", led.counts["append"]),
        (
            "hostile: slow readers opened / half-open 408s / big transactions (largest answer)",
            f"{led.counts['slow_reader_opened']} / {led.counts['half_open_408']} / "
            f"{led.counts['big_txn']} ({led.counts['big_txn_bytes_max']} bytes)",
        ),
        (
            "approvals requested / approved / committed",
            f"{led.counts['approval_request']} / {led.counts['approved']} / {led.counts['approval_commit']}",
        ),
        ("invalidations received", led.invalidations),
        ("errors", dict(led.errors) or 0),
        (
            "worker kills (new worker after s, server alive)",
            [
                (k.get("killed"), k.get("new_worker_after_s"), k.get("server_alive"))
                for k in run["kills"]
            ],
        ),
        ("bin/serve exited during the run at s", result["server_exited_at_s"]),
        ("server restarted for the checks", restarted),
        (
            "Ctrl-C: seconds / processes left after 10 s",
            f"{stopped.get('seconds')} / {stopped.get('left_after_10_s')}",
        ),
        (
            "health probes unanswered / worst ms",
            f"{len(health_fail)} / {result['health_worst_ms']}",
        ),
        (
            "acknowledged writes lost",
            f"{lost} (commits {writes['acknowledged_commits']}, appends {writes['acknowledged_appends']})",
        ),
        ("verify_audit", "intact" if audit.returncode == 0 else "FAILED"),
        *(
            (
                f"RSS {label} MB start / peak / end",
                f"{m['start_mb']} / {m['peak_mb']} / {m['end_mb']}",
            )
            for label, m in (("web", result["memory_web"]), ("all", result["memory_total"]))
        ),
        *(
            (
                f"RSS {label} slope MB/min, 1st / 2nd half (levels off?)",
                f"{m['slope_first_half_mb_per_min']} / {m['slope_second_half_mb_per_min']}"
                f" ({m['levels_off']})",
            )
            for label, m in (("web", result["memory_web"]), ("all", result["memory_total"]))
        ),
    ]
    print("\n| soak | |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    print(f"\n{out}")
    if not args.keep_data:
        shutil.rmtree(data_dir, ignore_errors=True)
    else:
        log(f"kept {data_dir}")
    ok = lost == 0 and audit.returncode == 0 and not restarted
    # The web process is the verdict: a killed and restarted worker makes the total jump.
    ok = ok and result["memory_web"]["levels_off"] is not False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
