"""ZeroLock throughput/latency benchmark. Run by hand, not part of the test suite.

Starts its own server (uvicorn or Daphne) against a throwaway data dir, on SQLite or
PostgreSQL+Redis, and drives it with N concurrent asyncio "agents" sharing one
httpx.AsyncClient. See bench/README.md.

    .venv/bin/python bench/run.py --db sqlite,postgres --server uvicorn,daphne

Self-contained: stdlib + httpx only (matplotlib used for a plot if importable).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
RESULTS_DIR = Path(__file__).resolve().parent / "results"

# serve: bin/serve, as `make run` serves (uvicorn plus a Celery worker running
# beat, under zerolock_site/supervisor.py).
SERVERS = ("uvicorn", "daphne", "serve")
DBS = ("sqlite", "postgres")
WORKLOADS = ("uncontended", "contended", "mixed", "append")

# Overridable, so two people benchmarking on one machine do not drop each other's database.
PG_DB = os.environ.get("ZEROLOCK_BENCH_PG_DB", "zerolock_bench")
PG_URL = f"postgres://postgres@127.0.0.1:5432/{PG_DB}"
PG_ADMIN = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test"]
REDIS_URL = os.environ.get("ZEROLOCK_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

HEALTH_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 30.0
COLUMNS = (
    "server",
    "db",
    "workload",
    "agents",
    "ops/s",
    "commits/s",
    "conflicts/s",
    "p50 ms",
    "p99 ms",
    "errors",
)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(*commands: str) -> None:
    args = list(PG_ADMIN)
    for c in commands:
        args += ["-c", c]
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True, text=True)


def server_env(
    db: str, data_dir: str, pg_url: str = PG_URL, redis_url: str = REDIS_URL
) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("DATABASE_URL", "REDIS_URL", "ZEROLOCK_DB_PATH"):
        env.pop(name, None)
    env["ZEROLOCK_DATA_DIR"] = data_dir
    env["PYTHONUNBUFFERED"] = "1"
    # One address and one key drive thousands of requests a second: lift the limits.
    env["ZEROLOCK_RATE_LIMIT_PER_MINUTE"] = env["ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE"] = "100000000"
    if db == "postgres":
        env["DATABASE_URL"] = pg_url
        env["REDIS_URL"] = redis_url
    return env


def server_command(server: str, port: int) -> list[str]:
    if server == "serve":
        return [str(ROOT / "bin" / "serve")]  # reads PORT from the environment
    if server in ("uvicorn", "daphne"):
        # Each by its entry point, as `make run` starts it: uvicorn on httptools +
        # uvloop with the bridge's drain at shutdown (zerolock_site/uvicorn_server.py),
        # Daphne with its patches (zerolock_site/daphne_server.py).
        return [
            str(VENV_BIN / "python"),
            "-m",
            f"zerolock_site.{server}_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
    if server.startswith("uvicorn"):
        # "uvicorn2": two uvicorn worker processes (docs/scaling.md's measure).
        workers = server.removeprefix("uvicorn")
        return [
            str(VENV_BIN / "uvicorn"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--http",
            "httptools",
            "--loop",
            "uvloop",
            "--no-access-log",
            "--workers",
            workers,
            "zerolock_site.asgi:application",
        ]
    raise SystemExit(f"no such server: {server!r}")


def manage(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Terminate the server's process group (it was started in its own session), then kill."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Server:
    name: str
    db: str
    url: str
    api_key: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str]


def wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with {server.proc.returncode}:\n{tail(server.log_path)}"
            )
        try:
            r = httpx.get(f"{server.url}/api/health", timeout=2)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{server.name} did not answer /api/health in {HEALTH_TIMEOUT_S:.0f}s:\n"
                    f"{tail(server.log_path)}"
                ) from None
            time.sleep(0.2)
            continue
        if r.status_code != 200:
            log(f"warning: /api/health answered {r.status_code}: {r.text[:300]}")
        return


@contextlib.contextmanager
def running_server(
    server_name: str,
    db: str,
    keep_data: bool,
    *,
    pg_db: str = PG_DB,
    redis_url: str = REDIS_URL,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """A ZeroLock server on a free port and a throwaway data dir (and, on postgres,
    the database pg_db created for it and dropped after), with an admin key; stopped
    however the block ends."""
    data_dir = tempfile.mkdtemp(prefix=f"zerolock-bench-{server_name}-{db}-")
    env = server_env(db, data_dir, f"{PG_URL.rsplit('/', 1)[0]}/{pg_db}", redis_url)
    env.update(extra_env or {})
    proc: subprocess.Popen[bytes] | None = None
    pg_created = False
    try:
        if db == "postgres":
            log(f"creating database {pg_db}")
            psql(f"DROP DATABASE IF EXISTS {pg_db}", f"CREATE DATABASE {pg_db}")
            pg_created = True
        log(f"migrating ({db}, data dir {data_dir})")
        manage(env, "migrate", "--noinput")
        out = manage(env, "createapikey", "bench", "--permissions", "admin")
        api_key = out.strip().splitlines()[-1].strip()
        port = free_port()
        env["PORT"] = str(port)  # bin/serve's port; the others take it as an argument
        log_path = Path(data_dir) / "server.log"
        log(f"starting {server_name} on port {port} (log {log_path})")
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                server_command(server_name, port),
                cwd=ROOT,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = Server(server_name, db, f"http://127.0.0.1:{port}", api_key, proc, log_path, env)
        wait_healthy(server)
        log(f"{server_name} is up")
        yield server
    finally:
        if proc is not None:
            log(f"stopping {server_name} (pid {proc.pid})")
            stop_process(proc)
        if pg_created:
            try:
                psql(f"DROP DATABASE IF EXISTS {pg_db}")
            except subprocess.CalledProcessError as exc:
                log(f"warning: could not drop {pg_db}: {exc.stderr.strip()}")
        if keep_data:
            log(f"kept data dir {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


# --------------------------------------------------------------------------- workloads


AgentLoop = Callable[[float], Awaitable[None]]


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    reads: int = 0
    commits: int = 0
    conflicts: int = 0
    errors: int = 0
    first_error: str | None = None

    def error(self, detail: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = detail


class Bench:
    """One workload at one concurrency, against one running server."""

    def __init__(self, client: httpx.AsyncClient, run: str, stats: Stats) -> None:
        self.client = client
        self.run = run
        self.stats = stats

    @staticmethod
    def headers(agent: int) -> dict[str, str]:
        return {"X-Agent-Id": f"bench-{agent}"}

    async def request(
        self, method: str, path: str, agent: int, body: dict[str, Any] | None = None
    ) -> httpx.Response | None:
        """One timed request; a transport failure counts as an error and returns None."""
        start = time.perf_counter()
        try:
            response = await self.client.request(
                method, path, json=body, headers=self.headers(agent)
            )
        except httpx.HTTPError as exc:
            self.stats.latencies.append(time.perf_counter() - start)
            self.stats.error(f"{method} {path}: {type(exc).__name__}: {exc}")
            await asyncio.sleep(0.05)  # don't spin if the server is gone
            return None
        self.stats.latencies.append(time.perf_counter() - start)
        return response

    def bad_status(self, method: str, path: str, response: httpx.Response) -> None:
        self.stats.error(f"{method} {path} -> {response.status_code}: {response.text[:1000]}")

    async def create_shard(self, shard_id: str) -> int:
        body = {"id": shard_id, "type": "decision", "initial_value": 0}
        r = await self.client.post("/api/shards", json=body, headers=self.headers(0))
        if r.status_code != 201:
            raise RuntimeError(f"creating {shard_id} -> {r.status_code}: {r.text[:1000]}")
        return int(r.json()["version"])

    async def commit(self, agent: int, shard_id: str, version: int, contended: bool) -> int:
        """Commit once; returns the version to expect next."""
        path = f"/api/shards/{shard_id}/commit"
        r = await self.request(
            "POST", path, agent, {"expected_version": version, "new_value": version}
        )
        if r is None:
            return version
        if r.status_code == 200:
            self.stats.commits += 1
            return int(r.json()["version"])
        if r.status_code == 409:
            try:
                current = int(r.json()["error"]["current_version"])
            except (ValueError, KeyError, TypeError):
                self.bad_status("POST", path, r)
                return version
            if contended:
                self.stats.conflicts += 1
            else:
                self.bad_status("POST", path, r)
            return current
        self.bad_status("POST", path, r)
        return version

    async def read(self, agent: int, shard_id: str, version: int) -> int:
        path = f"/api/shards/{shard_id}"
        r = await self.request("GET", path, agent)
        if r is None:
            return version
        if r.status_code == 200:
            self.stats.reads += 1
            return int(r.json()["version"])
        self.bad_status("GET", path, r)
        return version

    # Each workload sets up its shards (not timed), then returns one loop per agent;
    # each loop runs until the deadline it is given.

    async def own_shards(self, agents: int) -> tuple[list[str], list[int]]:
        """One decision shard per agent: their ids and starting versions."""
        ids = [f"b-{self.run}-{n}" for n in range(agents)]
        return ids, list(await asyncio.gather(*(self.create_shard(i) for i in ids)))

    async def uncontended(self, agents: int) -> list[AgentLoop]:
        ids, versions = await self.own_shards(agents)

        def loop(n: int) -> AgentLoop:
            async def run(deadline: float) -> None:
                v = versions[n]
                while time.perf_counter() < deadline:
                    v = await self.commit(n, ids[n], v, contended=False)

            return run

        return [loop(n) for n in range(agents)]

    async def contended(self, agents: int) -> list[AgentLoop]:
        shard_id = f"b-{self.run}-shared"
        start_version = await self.create_shard(shard_id)

        def loop(n: int) -> AgentLoop:
            async def run(deadline: float) -> None:
                v = start_version
                while time.perf_counter() < deadline:
                    v = await self.commit(n, shard_id, v, contended=True)

            return run

        return [loop(n) for n in range(agents)]

    async def mixed(self, agents: int) -> list[AgentLoop]:
        ids, versions = await self.own_shards(agents)

        def loop(n: int) -> AgentLoop:
            async def run(deadline: float) -> None:
                v = versions[n]
                while time.perf_counter() < deadline:
                    if random.random() < 0.2:
                        v = await self.commit(n, ids[n], v, contended=False)
                    else:
                        v = await self.read(n, ids[n], v)

            return run

        return [loop(n) for n in range(agents)]

    async def append(self, agents: int) -> list[AgentLoop]:
        """Every agent appends single items to one additive array shard."""
        shard_id = f"b-{self.run}-log"
        body = {"id": shard_id, "type": "additive", "crdt_type": "array"}
        r = await self.client.post("/api/shards", json=body, headers=self.headers(0))
        if r.status_code != 201:
            raise RuntimeError(f"creating {shard_id} -> {r.status_code}: {r.text[:1000]}")
        path = f"/api/shards/{shard_id}/commit"

        def loop(n: int) -> AgentLoop:
            async def run(deadline: float) -> None:
                i = 0
                while time.perf_counter() < deadline:
                    r = await self.request("POST", path, n, {"append": [{"agent": n, "i": i}]})
                    i += 1
                    if r is not None and r.status_code == 200:
                        self.stats.commits += 1
                    elif r is not None:
                        self.bad_status("POST", path, r)

            return run

        return [loop(n) for n in range(agents)]


def percentile_ms(values: list[float], p: float) -> float:
    """Nearest-rank percentile, in milliseconds."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1] * 1000


async def run_workload(
    server: Server, workload: str, agents: int, seconds: float, run: str
) -> dict[str, Any]:
    stats = Stats()
    async with httpx.AsyncClient(
        base_url=server.url,
        headers={"X-API-Key": server.api_key, "Content-Type": "application/json"},
        limits=httpx.Limits(max_connections=agents + 10),
        timeout=REQUEST_TIMEOUT_S,
    ) as client:
        bench = Bench(client, run, stats)
        setup: Callable[[int], Awaitable[list[AgentLoop]]] = getattr(bench, workload)
        loops = await setup(agents)
        start = time.perf_counter()
        await asyncio.gather(*(loop(start + seconds) for loop in loops))
        elapsed = time.perf_counter() - start
    if stats.first_error:
        log(f"  first error: {stats.first_error}")
    return {
        "server": server.name,
        "db": server.db,
        "workload": workload,
        "agents": agents,
        # Answered as expected: 200s, plus 409s in the contended workload.
        "ops/s": (stats.reads + stats.commits + stats.conflicts) / elapsed,
        "commits/s": stats.commits / elapsed,
        "conflicts/s": stats.conflicts / elapsed,
        "p50 ms": percentile_ms(stats.latencies, 50),
        "p99 ms": percentile_ms(stats.latencies, 99),
        "errors": stats.errors,
        "requests": len(stats.latencies),
        "seconds": elapsed,
        "first_error": stats.first_error,
    }


# --------------------------------------------------------------------------- output


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.1f}"
    return str(value)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row[c]) for c in COLUMNS) + " |")
    return "\n".join(lines)


def json_row(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = key.replace("/s", "_per_s").replace(" ms", "_ms")
        out[name] = None if isinstance(value, float) and math.isnan(value) else value
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # optional: no matplotlib, no plot
        return False
    workloads = [w for w in WORKLOADS if any(r["workload"] == w for r in rows)]
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4), squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        configs = sorted({(r["server"], r["db"]) for r in rows if r["workload"] == workload})
        for server, db in configs:
            points = sorted(
                (r["agents"], r["ops/s"])
                for r in rows
                if r["workload"] == workload and r["server"] == server and r["db"] == db
            )
            ax.plot(
                [p[0] for p in points], [p[1] for p in points], marker="o", label=f"{server}/{db}"
            )
        ax.set_title(workload)
        ax.set_xlabel("agents")
        ax.set_ylabel("ops/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- main


def comma_list(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(raw: str) -> list[str]:
        items = [s.strip() for s in raw.split(",") if s.strip()]
        bad = [s for s in items if s not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)} (comma-separated)")
        return items

    return parse


def int_list(raw: str) -> list[int]:
    try:
        values = [int(s) for s in raw.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated integers") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("expected comma-separated positive integers")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=comma_list(DBS), default=["sqlite"], help="sqlite,postgres")
    parser.add_argument(
        "--server", type=comma_list(SERVERS), default=["uvicorn"], help=",".join(SERVERS)
    )
    parser.add_argument(
        "--workload",
        type=comma_list(WORKLOADS),
        default=list(WORKLOADS),
        help="uncontended,contended,mixed,append (default: all)",
    )
    parser.add_argument("--agents", type=int_list, default=[1, 10, 50], help="e.g. 1,10,50")
    parser.add_argument("--seconds", type=float, default=10.0, help="per workload and concurrency")
    parser.add_argument(
        "--keep-data", action="store_true", help="keep the temp data dirs (and server logs)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    rows: list[dict[str, Any]] = []
    run_no = 0
    try:
        for db in args.db:
            for server_name in args.server:
                with running_server(server_name, db, args.keep_data) as server:
                    for workload in args.workload:
                        for agents in args.agents:
                            run_no += 1
                            log(
                                f"{server_name}/{db} {workload} agents={agents} "
                                f"for {args.seconds:g}s"
                            )
                            row = asyncio.run(
                                run_workload(
                                    server, workload, agents, args.seconds, f"{stamp}-{run_no}"
                                )
                            )
                            rows.append(row)
                            log(
                                f"  -> {row['ops/s']:.1f} ops/s, p99 {row['p99 ms']:.1f} ms, "
                                f"{row['errors']} errors"
                            )
    except KeyboardInterrupt:
        log("interrupted: reporting what was measured")
    if not rows:
        log("no results")
        return 1

    print(markdown_table(rows))
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    json_path = RESULTS_DIR / f"{stamp}.json"
    json_path.write_text(json.dumps([json_row(r) for r in rows], indent=2) + "\n")
    log(f"wrote {json_path}")
    png_path = RESULTS_DIR / f"{stamp}.png"
    if plot(rows, png_path):
        log(f"wrote {png_path}")
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
