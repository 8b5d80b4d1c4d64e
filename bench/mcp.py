"""What the MCP layer costs: server CPU per call of /mcp's tools beside their REST requests.

Run by hand (not a test):

    .venv/bin/python bench/mcp.py                         # embedded defaults, 2,000 calls per row
    .venv/bin/python bench/mcp.py --calls 500 --db sqlite,postgres
    .venv/bin/python bench/mcp.py --profile               # and py-spy on the server, MCP only

Starts the web server as `make run` serves it (uvicorn, bench/run.py's
``running_server``: a throwaway data dir, an admin key, rate limits lifted), and in
the same run, against the same server process, sends sequential calls (one in
flight) of

- ``GET /api/shards/{id}`` and the MCP tool ``shard_read``;
- ``POST /api/shards/{id}/commit`` and the MCP tool ``shard_commit``,

REST from one ``httpx.AsyncClient``, MCP from one official ``mcp.Client`` session
(stateless server side: each tool call is one POST /mcp). Each row is warmed up
first, then measured in ``--rounds`` slices that alternate REST and MCP, so a
change in the machine's load falls on both. Server CPU is user + system time of
the server's process tree from /proc (bench/proctree.py), read before and after
each slice; the client runs in this process, not in the tree. Latency is
``time.perf_counter()`` around each call, p50/p99 nearest-rank.

Writes ``bench/results/mcp-<UTC>.json`` and, if matplotlib is importable (the
``bench`` extra), a bar chart next to it; ``--plot FILE.json`` redraws one.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2

# Run as a script, this file's folder comes first on sys.path, and this file is
# named mcp: take the folder off so `mcp` is the SDK, then put it back for the
# benches' shared modules.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

sys.path.insert(0, str(HERE))
from proctree import cpu_seconds, tree  # noqa: E402
from run import (  # noqa: E402
    DBS,
    RESULTS_DIR,
    VENV_BIN,
    comma_list,
    log,
    percentile_ms,
    running_server,
)

OPS = ("read", "commit")
PROTOCOLS = ("rest", "mcp")
AGENT = "bench-mcp"


class Driver:
    """One persistent client per protocol; each method is one call, one in flight."""

    def __init__(self, rest: httpx.AsyncClient, mcp: Client) -> None:
        self.rest = rest
        self.mcp = mcp
        self.versions: dict[str, int] = {}
        self.mcp_posts = 0  # HTTP requests the MCP client sent (one per call, if stateless)

    async def rest_read(self, shard: str) -> None:
        r = await self.rest.get(f"/api/shards/{shard}")
        if r.status_code != 200:
            raise RuntimeError(f"GET {shard} -> {r.status_code}: {r.text[:500]}")

    async def rest_commit(self, shard: str) -> None:
        version = self.versions[shard]
        r = await self.rest.post(
            f"/api/shards/{shard}/commit",
            json={"expected_version": version, "new_value": {"n": version}},
        )
        if r.status_code != 200:
            raise RuntimeError(f"commit {shard} -> {r.status_code}: {r.text[:500]}")
        self.versions[shard] = int(r.json()["version"])

    async def mcp_read(self, shard: str) -> None:
        result = await self.mcp.call_tool("shard_read", {"shard_id": shard})
        if result.is_error:
            raise RuntimeError(f"shard_read {shard}: {result.structured_content}")

    async def mcp_commit(self, shard: str) -> None:
        version = self.versions[shard]
        result = await self.mcp.call_tool(
            "shard_commit",
            {"shard_id": shard, "expected_version": version, "new_value": {"n": version}},
        )
        if result.is_error or not isinstance(result.structured_content, dict):
            raise RuntimeError(f"shard_commit {shard}: {result.structured_content}")
        self.versions[shard] = int(result.structured_content["version"])


async def measure(
    server_pid: int, driver: Driver, calls: int, warmup: int, rounds: int
) -> list[dict[str, Any]]:
    """Every (op, protocol) row: server CPU per call and client latency."""
    rows = []
    for op in OPS:
        cpu = dict.fromkeys(PROTOCOLS, 0.0)
        done = dict.fromkeys(PROTOCOLS, 0)
        latencies: dict[str, list[float]] = {p: [] for p in PROTOCOLS}
        posts_before = driver.mcp_posts
        for protocol in PROTOCOLS:
            call = getattr(driver, f"{protocol}_{op}")
            for _ in range(warmup):
                await call(f"{protocol}-{op}")
        posts_before = driver.mcp_posts
        per_round = max(1, calls // rounds)
        for n in range(rounds):
            # Alternate which protocol goes first, so neither always follows the other.
            order = PROTOCOLS if n % 2 == 0 else PROTOCOLS[::-1]
            for protocol in order:
                call = getattr(driver, f"{protocol}_{op}")
                shard = f"{protocol}-{op}"
                count = per_round if n < rounds - 1 else calls - per_round * (rounds - 1)
                members = tree(server_pid)
                before = sum(cpu_seconds(p) for p in members)
                for _ in range(count):
                    started = time.perf_counter()
                    await call(shard)
                    latencies[protocol].append(time.perf_counter() - started)
                cpu[protocol] += sum(cpu_seconds(p) for p in members) - before
                done[protocol] += count
        mcp_posts = driver.mcp_posts - posts_before
        for protocol in PROTOCOLS:
            rows.append(
                {
                    "op": op,
                    "protocol": protocol,
                    "calls": done[protocol],
                    "server_cpu_ms_per_call": 1000 * cpu[protocol] / done[protocol],
                    "p50_ms": percentile_ms(latencies[protocol], 50),
                    "p99_ms": percentile_ms(latencies[protocol], 99),
                    "http_requests_per_call": (
                        mcp_posts / done[protocol] if protocol == "mcp" else 1.0
                    ),
                }
            )
        rest, mcp = rows[-2], rows[-1]
        log(
            f"  {op}: REST {rest['server_cpu_ms_per_call']:.2f} ms CPU/call, "
            f"MCP {mcp['server_cpu_ms_per_call']:.2f} ms CPU/call"
        )
    return rows


def overhead(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """MCP minus REST, per op and configuration."""
    out = []
    by = {(r["db"], r["op"], r["protocol"]): r for r in rows}
    for db, op in dict.fromkeys((r["db"], r["op"]) for r in rows):
        rest, mcp = by[(db, op, "rest")], by[(db, op, "mcp")]
        out.append(
            {
                "db": db,
                "op": op,
                "rest_cpu_ms": rest["server_cpu_ms_per_call"],
                "mcp_cpu_ms": mcp["server_cpu_ms_per_call"],
                "mcp_minus_rest_cpu_ms": mcp["server_cpu_ms_per_call"]
                - rest["server_cpu_ms_per_call"],
                "mcp_over_rest_cpu": mcp["server_cpu_ms_per_call"] / rest["server_cpu_ms_per_call"],
                "rest_p50_ms": rest["p50_ms"],
                "mcp_p50_ms": mcp["p50_ms"],
                "rest_p99_ms": rest["p99_ms"],
                "mcp_p99_ms": mcp["p99_ms"],
            }
        )
    return out


async def drive(
    url: str, api_key: str, pid: int, args: argparse.Namespace, spy_out: Path | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    headers = {"X-API-Key": api_key, "X-Agent-Id": AGENT}
    async with AsyncExitStack() as stack:
        rest = await stack.enter_async_context(
            httpx.AsyncClient(base_url=url, headers=headers, timeout=60)
        )
        driver_box: list[Driver] = []

        async def counted(request: httpx2.Request) -> None:
            if driver_box:
                driver_box[0].mcp_posts += 1

        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, timeout=60, event_hooks={"request": [counted]})
        )
        mcp = await stack.enter_async_context(
            Client(streamable_http_client(f"{url}/mcp", http_client=http))
        )
        driver = Driver(rest, mcp)
        driver_box.append(driver)
        for protocol in PROTOCOLS:
            for op in OPS:
                body = {"id": f"{protocol}-{op}", "type": "decision", "initial_value": {"n": 0}}
                r = await rest.post("/api/shards", json=body)
                r.raise_for_status()
                driver.versions[body["id"]] = int(r.json()["version"])
        tools = await mcp.list_tools()
        log(f"  /mcp lists {len(tools.tools)} tools")
        rows = await measure(pid, driver, args.calls, args.warmup, args.rounds)
        profiled: list[dict[str, Any]] = []
        if spy_out is not None:
            profiled = await profile(pid, driver, spy_out, args)
    return rows, profiled


async def profile(
    pid: int, driver: Driver, raw: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """py-spy on the server while MCP reads, then REST reads, run for --profile-seconds each."""
    out = []
    for protocol in PROTOCOLS:
        path = raw.with_name(raw.stem + f"-{protocol}.txt")
        spy = subprocess.Popen(
            [
                str(VENV_BIN / "py-spy"),
                "record",
                "-p",
                str(pid),
                "-d",
                str(int(args.profile_seconds)),
                "-r",
                "200",
                "-f",
                "raw",
                "--gil",
                "-o",
                str(path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await asyncio.sleep(1.0)  # py-spy attaches
        call = getattr(driver, f"{protocol}_read")
        calls = 0
        while spy.poll() is None:
            await call(f"{protocol}-read")
            calls += 1
        out.append({"protocol": protocol, "op": "read", "calls": calls, "raw": path.name})
        log(f"  profiled {protocol} read: {calls} calls -> {path.name}")
    return out


# Frames that tell where a /mcp request's time goes (inclusive shares), in this order.
LAYERS = (
    ("whole /mcp request (McpEndpoint.__call__)", "McpEndpoint.__call__ (zerolock_mcp/server.py"),
    ("  key check before JSON-RPC (_admitted)", "_admitted (zerolock_mcp/server.py"),
    ("  SDK transport (handle_request)", "StreamableHTTPSessionManager.handle_request (mcp/"),
    # mcp 2.3 validates Mcp-Param-* headers of every tools/call against the tool's
    # input schema, found by running the server's whole tools/list handler (and
    # serializing its answer) unless the Server was given get_tool_input_schema.
    ("    tools/list run per call (_mcp_param_rejection)", "_mcp_param_rejection (mcp/"),
    ("    dispatch (ServerRunner._on_request)", "ServerRunner._on_request (mcp/"),
    ("    serialize results (ServerRunner._serialize)", "ServerRunner._serialize (mcp/"),
    ("    pydantic dump (TypeAdapter.dump_python)", "TypeAdapter.dump_python (pydantic/"),
    ("    pydantic validate (validate_python)", "TypeAdapter.validate_python (pydantic/"),
    ("    JSON-RPC answer written (_write)", "_write (mcp/server/_streamable_http_modern.py"),
    ("  call_tool (ZeroLock's handler)", "McpEndpoint.call_tool (zerolock_mcp/server.py"),
    ("    tool.request (arguments to REST)", "Tool.request (zerolock_mcp/tools.py"),
    ("    in-process API call (McpEndpoint.api_call)", "McpEndpoint.api_call (zerolock_mcp/"),
    ("Django handler (the API request, any route)", "BaseHandler.get_response (django/"),
)


def shares(raw: Path, top: int = 40) -> tuple[int, list[tuple[float, str]]]:
    """Samples, and the inclusive share of each frame (counted once per stack)."""
    total = 0
    inclusive: collections.Counter[str] = collections.Counter()
    root = str(Path(__file__).resolve().parent.parent) + "/"
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        seen = set()
        for frame in stack.split(";"):
            name, _, where = frame.partition(" (")
            where = where.split(":")[0].split("site-packages/")[-1].replace(root, "")
            label = f"{name} ({where})"
            if label not in seen:
                seen.add(label)
                inclusive[label] += n
    return total, [(100 * v / total, k) for k, v in inclusive.most_common(top)] if total else []


def layer_shares(raw: Path) -> list[tuple[str, float]]:
    total, rows = shares(raw, top=100000)
    out = []
    for title, needle in LAYERS:
        best = max((share for share, label in rows if needle in label), default=0.0)
        out.append((title, best))
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| db | call | REST CPU ms | MCP CPU ms | MCP - REST ms | MCP / REST "
        "| REST p50 / p99 ms | MCP p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        call = "read" if r["op"] == "read" else "commit"
        lines.append(
            f"| {r['db']} | {call} | {r['rest_cpu_ms']:.2f} | {r['mcp_cpu_ms']:.2f} "
            f"| {r['mcp_minus_rest_cpu_ms']:+.2f} | {r['mcp_over_rest_cpu']:.2f}x "
            f"| {r['rest_p50_ms']:.1f} / {r['rest_p99_ms']:.1f} "
            f"| {r['mcp_p50_ms']:.1f} / {r['mcp_p99_ms']:.1f} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # optional: no matplotlib, no plot
        return False
    rows = result["overhead"]
    labels = [f"{r['db']}\n{r['op']}" for r in rows]
    x = range(len(rows))
    fig, (cpu_ax, lat_ax) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.38
    cpu_ax.bar([i - width / 2 for i in x], [r["rest_cpu_ms"] for r in rows], width, label="REST")
    cpu_ax.bar([i + width / 2 for i in x], [r["mcp_cpu_ms"] for r in rows], width, label="MCP")
    for i, r in enumerate(rows):
        cpu_ax.annotate(
            f"{r['mcp_over_rest_cpu']:.2f}x",
            (i + width / 2, r["mcp_cpu_ms"]),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    cpu_ax.set_xticks(list(x), labels)
    cpu_ax.set_ylabel("server CPU per call, ms")
    cpu_ax.set_title("server CPU per call (sequential)")
    cpu_ax.legend()
    for key, offset, name in (("rest", -width / 2, "REST"), ("mcp", width / 2, "MCP")):
        p50 = [r[f"{key}_p50_ms"] for r in rows]
        p99 = [r[f"{key}_p99_ms"] for r in rows]
        lat_ax.bar([i + offset for i in x], p50, width, label=f"{name} p50")
        lat_ax.scatter([i + offset for i in x], p99, marker="_", s=300, label=f"{name} p99")
    lat_ax.set_xticks(list(x), labels)
    lat_ax.set_ylabel("client-observed latency, ms")
    lat_ax.set_title("latency p50 (bars) and p99 (ticks)")
    lat_ax.legend(fontsize=8)
    fig.suptitle(f"/mcp vs REST, {result['calls']} calls per row, {result['stamp']}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def report(result: dict[str, Any]) -> None:
    """Print the table and, per profile, the layers' inclusive shares (kept in result)."""
    print(table(result["overhead"]))
    for db, profiled in result["profiles"].items():
        for p in profiled:
            raw = RESULTS_DIR / p["raw"]
            if raw.exists():
                total, top = shares(raw)
                p["samples"], p["layers"], p["top"] = total, layer_shares(raw), top
            print(f"\n{db}, {p['protocol']} read, py-spy --gil, {p.get('samples', 0)} samples:")
            for title, share in p.get("layers", []):
                if share:
                    print(f"{share:5.1f}%  {title}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=comma_list(DBS), default=["sqlite"], help="sqlite,postgres")
    parser.add_argument("--server", default="uvicorn", choices=["uvicorn", "daphne"])
    parser.add_argument("--calls", type=int, default=2000, help="measured calls per row")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured calls per row first")
    parser.add_argument("--rounds", type=int, default=4, help="alternating REST/MCP slices")
    parser.add_argument(
        "--profile", action="store_true", help="then py-spy (--gil) the server on reads"
    )
    parser.add_argument("--profile-seconds", type=float, default=15)
    parser.add_argument("--keep-data", action="store_true")
    parser.add_argument(
        "--plot", type=Path, help="only redraw the plot (and profile summary) of this results JSON"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot:
        result = json.loads(args.plot.read_text())
        report(result)  # the profile's layers again, from the raw stacks if they are kept
        args.plot.write_text(json.dumps(result, indent=2) + "\n")
        return 0 if plot(result, args.plot.with_suffix(".png")) else 1
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    profiles: dict[str, Any] = {}
    for db in args.db:
        with running_server(args.server, db, args.keep_data) as server:
            log(f"{args.server}/{db}: {args.calls} calls per row, warm-up {args.warmup}")
            spy = RESULTS_DIR / f"mcp-profile-{db}-{stamp}.txt" if args.profile else None
            started = time.monotonic()
            measured, profiled = asyncio.run(
                drive(server.url, server.api_key, server.proc.pid, args, spy)
            )
            log(f"  {time.monotonic() - started:.0f} s")
            rows += [{"server": args.server, "db": db, **r} for r in measured]
            if profiled:
                profiles[db] = profiled
    result = {
        "stamp": stamp,
        "server": args.server,
        "calls": args.calls,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "rows": rows,
        "overhead": overhead(rows),
        "profiles": profiles,
    }
    report(result)
    json_path = RESULTS_DIR / f"mcp-{stamp}.json"
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    log(f"wrote {json_path}")
    if plot(result, json_path.with_suffix(".png")):
        log(f"wrote {json_path.with_suffix('.png')}")
    else:
        log("no matplotlib: no plot (pip install -e '.[bench]', then --plot the JSON)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
