"""What a long LangGraph thread costs in ZeroLockSaver: bytes stored and time
per step, early and late in the thread, against a live server.

Run by hand: ``.venv/bin/python bench/langgraph_checkpoints.py [--steps 1000]
[--layout new|old] [--db sqlite|postgres]``. ``--layout old`` runs the 0.x saver
(one shard per thread), taken from git (``--old-commit``), for the before/after.

A step is one ``invoke`` of a one-node graph on one thread (a read of the latest
checkpoint, then the checkpoints and writes LangGraph saves); the state stays
the same size (a counter and a 200-byte note), so whatever grows is the saver's.
Bytes are read from the server's database: the audit entries' stored values for
the thread's shards, the shard rows' values, and the SQLite file. At the end the
thread is deleted and what that gave back is measured."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proctree import cpu_seconds, tree  # noqa: E402
from run import ROOT, log, running_server  # noqa: E402

sys.path.insert(0, str(ROOT))
from langgraph.graph import END, START, StateGraph  # noqa: E402


class Counter(TypedDict, total=False):
    n: int
    note: str


def saver_class(layout: str, old_commit: str) -> Any:
    if layout == "new":
        from zerolock_sdk.langgraph import ZeroLockSaver

        return ZeroLockSaver
    source = subprocess.run(
        ["git", "show", f"{old_commit}:zerolock_sdk/langgraph.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "langgraph_old.py"
    path.write_text(source)
    # A module of the zerolock_sdk package, so its relative imports resolve.
    spec = importlib.util.spec_from_file_location("zerolock_sdk.langgraph_old", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.ZeroLockSaver


def graph(saver: Any) -> Any:
    builder = StateGraph(Counter)
    builder.add_node("step", lambda state: {"n": state.get("n", 0) + 1, "note": "x" * 200})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


class Sizes:
    """Reads what the server stored, from its database (read-only)."""

    def __init__(self, env: dict[str, str], db: str) -> None:
        self.db = db
        if db == "sqlite":
            self.path = Path(env["ZEROLOCK_DATA_DIR"]) / "zerolock.sqlite3"
        else:
            self.url = env["DATABASE_URL"]

    def query(self, sql: str) -> int:
        if self.db == "sqlite":
            with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as conn:
                return int(conn.execute(sql).fetchone()[0] or 0)
        out = subprocess.run(
            ["psql", self.url, "-tAc", sql], check=True, capture_output=True, text=True
        )
        return int(out.stdout.strip() or 0)

    def audit(self) -> tuple[int, int]:
        rows = self.query("SELECT count(*) FROM shards_auditentry WHERE shard_id LIKE 'lg.%'")
        size = self.query(
            "SELECT sum(length(CAST(value AS TEXT))) FROM shards_auditentry"
            " WHERE shard_id LIKE 'lg.%'"
        )
        return rows, size

    def shards(self) -> tuple[int, int]:
        rows = self.query("SELECT count(*) FROM shards_shard WHERE id LIKE 'lg.%'")
        size = self.query(
            "SELECT sum(length(CAST(value AS TEXT))) FROM shards_shard WHERE id LIKE 'lg.%'"
        )
        return rows, size

    def database(self) -> int:
        if self.db == "sqlite":
            return sum(
                p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file()
            )
        return self.query("SELECT pg_database_size(current_database())")

    def free_pages_bytes(self) -> int:
        if self.db != "sqlite":
            return 0
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as conn:
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            page = conn.execute("PRAGMA page_size").fetchone()[0]
        return int(free * page)


def mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--layout", choices=["new", "old"], default="new")
    parser.add_argument("--old-commit", default="cabcc28")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--window", type=int, default=100, help="steps in each timed window")
    args = parser.parse_args()
    saver_type = saver_class(args.layout, args.old_commit)
    with running_server("uvicorn", args.db, keep_data=False) as server:
        sizes = Sizes(server.env, args.db)
        saver = saver_type(server.url, api_key=server.api_key, agent_id="bench")
        app = graph(saver)
        config = {"configurable": {"thread_id": "bench-thread"}}
        base_db = sizes.database()
        times: list[float] = []
        marks: dict[int, dict[str, Any]] = {}

        def server_cpu() -> float:
            # CPU seconds of the server's processes: the work a step costs it,
            # whatever else shares the machine (wall time here is noisy).
            return sum(cpu_seconds(pid) for pid in tree(server.proc.pid))

        cpu_mark, client_mark = server_cpu(), time.process_time()
        log(f"{args.layout} layout, {args.steps} steps")
        for step in range(1, args.steps + 1):
            started = time.perf_counter()
            app.invoke({"note": "go"}, config)
            times.append(time.perf_counter() - started)
            if step % args.window == 0 or step == args.steps:
                cpu_now, client_now = server_cpu(), time.process_time()
                server_ms = (cpu_now - cpu_mark) * 1000 / args.window
                client_ms = (client_now - client_mark) * 1000 / args.window
                audit_rows, audit_bytes = sizes.audit()
                # The read every step starts with, alone: the latest checkpoint.
                reads = []
                for _ in range(20):
                    started = time.perf_counter()
                    saver.get_tuple(config)
                    reads.append(time.perf_counter() - started)
                marks[step] = {
                    "audit_rows": audit_rows,
                    "audit_bytes": audit_bytes,
                    "db_bytes": sizes.database() - base_db,
                    "latest_read_ms_p50": round(statistics.median(reads) * 1000, 1),
                    "server_cpu_ms_per_step": round(server_ms, 1),
                    "client_cpu_ms_per_step": round(client_ms, 1),
                }
                cpu_mark, client_mark = server_cpu(), time.process_time()
                recent = times[-args.window :]
                log(
                    f"step {step}: {statistics.mean(recent) * 1000:.1f} ms/step, "
                    f"audit {mib(audit_bytes)} MiB in {audit_rows} rows, "
                    f"latest read {marks[step]['latest_read_ms_p50']} ms, "
                    f"server CPU {server_ms:.1f} ms/step, client CPU {client_ms:.1f} ms/step"
                )
        assert app.get_state(config).values["n"] == args.steps
        shard_rows, shard_bytes = sizes.shards()
        before_delete = sizes.database()
        # The steps' requests (the probes' reads left out).
        requests = sum(client.requests_sent for client in saver._clients.values())
        requests -= 20 * len(marks)
        # Thread length alone: steps of this long thread and of a new one, taken
        # in turns, so whatever else loads the machine loads both alike.
        fresh = {"configurable": {"thread_id": "bench-fresh"}}
        turns: dict[str, list[float]] = {"long": [], "fresh": []}
        for _ in range(args.window):
            for name, which in (("long", config), ("fresh", fresh)):
                started = time.perf_counter()
                app.invoke({"note": "go"}, which)
                turns[name].append(time.perf_counter() - started)
        saver.delete_thread("bench-fresh")
        started = time.perf_counter()
        saver.delete_thread("bench-thread")
        delete_seconds = time.perf_counter() - started
        left_rows, left_bytes = sizes.shards()
        # What the audit keeps after the deletes (the turns' steps included).
        audit_kept = sizes.audit()
        free_after_delete = sizes.free_pages_bytes()

    audit_rows, audit_bytes = marks[max(marks)]["audit_rows"], marks[max(marks)]["audit_bytes"]
    window = args.window
    first, last = times[:window], times[-window:]
    result = {
        "layout": args.layout,
        "db": args.db,
        "steps": args.steps,
        "ms_per_step_first": round(statistics.mean(first) * 1000, 1),
        "ms_per_step_last": round(statistics.mean(last) * 1000, 1),
        "p50_first": round(statistics.median(first) * 1000, 1),
        "p50_last": round(statistics.median(last) * 1000, 1),
        "server_cpu_ms_first": marks[min(marks)]["server_cpu_ms_per_step"],
        "server_cpu_ms_last": marks[max(marks)]["server_cpu_ms_per_step"],
        "latest_read_ms_first": marks[min(marks)]["latest_read_ms_p50"],
        "latest_read_ms_last": marks[max(marks)]["latest_read_ms_p50"],
        "in_turns_p50_ms_long_thread": round(statistics.median(turns["long"]) * 1000, 1),
        "in_turns_p50_ms_new_thread": round(statistics.median(turns["fresh"]) * 1000, 1),
        "marks": marks,
        "shard_rows": shard_rows,
        "shard_bytes": shard_bytes,
        "audit_rows": audit_rows,
        "audit_rows_bytes_kept_after_deletes": audit_kept,
        "audit_bytes": audit_bytes,
        "audit_bytes_per_step": round(audit_bytes / args.steps),
        "db_growth_bytes": before_delete - base_db,
        "deleted_seconds": round(delete_seconds, 2),
        "shard_rows_after_delete": left_rows,
        "shard_bytes_after_delete": left_bytes,
        "sqlite_free_bytes_after_delete": free_after_delete,
        "requests_per_step": round(requests / args.steps, 2),
    }
    print(json.dumps(result, indent=1))
    steps_last = f"{args.steps - window + 1}-{args.steps}"
    print(
        f"\n| layout | steps | ms/step 1-{window} | ms/step {steps_last} "
        "| server CPU ms/step, first / last | audit MiB | audit bytes/step "
        "| shard rows MiB | DB growth MiB | requests/step |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.layout} | {args.steps} | {result['ms_per_step_first']} "
        f"| {result['ms_per_step_last']} "
        f"| {result['server_cpu_ms_first']} / {result['server_cpu_ms_last']} "
        f"| {mib(audit_bytes)} | {result['audit_bytes_per_step']} "
        f"| {mib(shard_bytes)} | {mib(result['db_growth_bytes'])} "
        f"| {result['requests_per_step']} |"
    )


if __name__ == "__main__":
    main()
