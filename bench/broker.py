"""Kill test of the embedded Celery broker: does a message survive concurrent use?

Several processes publish N numbered tasks at once while the Celery worker is
killed -9 a few times and restarted at once (as bin/serve's supervisor does).
Each executed task appends its number to a file. At the end:

- lost       = acknowledged publishes never executed;
- duplicated = executions beyond the first of a number;
- corrupted  = executions whose payload arrived altered, plus messages the
               worker could not decode (JSONDecodeError in its log);
- self-deaths = worker exits we did not cause (the filesystem transport's
               "Unrecoverable error: JSONDecodeError" took the API down, issue 16).

Both transports deliver at most once: a message the killed worker had taken but
not finished is lost by design; those losses are bounded by the prefetch (one
running + one reserved per kill) and are reported apart from the rest.

    PYTHONPATH=$PWD .venv/bin/python bench/broker.py                 # both brokers
    PYTHONPATH=$PWD .venv/bin/python bench/broker.py --broker sqlite --tasks 5000

This file is also the worker's Celery app (``celery -A broker`` run in bench/).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import multiprocessing
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from celery import Celery

ROOT = Path(__file__).resolve().parent.parent


def _zerolock_module(name: str):
    """A supervision module by path: importing the package would load the
    project's Celery app and Django, whose signals would follow this worker."""
    spec = importlib.util.spec_from_file_location(f"zl_{name}", ROOT / "supervision" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_app() -> Celery:
    app = Celery("brokerbench")
    data = Path(os.environ.get("BENCH_DATA_DIR", tempfile.gettempdir()))
    if os.environ.get("BENCH_BROKER", "sqlite") == "filesystem":
        # Exactly what settings.py configured before issue 16.
        folders = data / "celery-broker"
        for sub in ("queue", "processed", "control"):
            (folders / sub).mkdir(parents=True, exist_ok=True)
        url, options = (
            "filesystem://",
            {
                "data_folder_in": str(folders / "queue"),
                "data_folder_out": str(folders / "queue"),
                "processed_folder": str(folders / "processed"),
                "control_folder": str(folders / "control"),
            },
        )
    else:
        url, options = _zerolock_module("broker.py").embedded_broker(data)
        # As settings.py:
        app.conf.broker_transport = _zerolock_module("sqlite_transport.py").SqliteTransport
    app.conf.update(
        broker_url=url,
        broker_transport_options=options,
        task_ignore_result=True,
        worker_prefetch_multiplier=1,  # as settings.py
        broker_connection_retry_on_startup=True,
    )
    return app


app = make_app()


@app.task(name="bench.record")
def record(producer: int, seq: int, payload: str, digest: str) -> None:
    intact = hashlib.sha256(payload.encode()).hexdigest() == digest
    line = f"{producer}:{seq}:{'ok' if intact else 'bad'}\n".encode()
    fd = os.open(os.environ["BENCH_EXECUTED"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)  # one small O_APPEND write: lines never interleave
    finally:
        os.close(fd)


def produce(producer: int, count: int, payload_bytes: int, sent_path: str, rate: float) -> None:
    publisher = make_app()  # this process's own connection, to the broker of its env
    sent = 0
    with open(sent_path, "w") as out:
        for seq in range(count):
            payload = os.urandom(payload_bytes // 2).hex()
            digest = hashlib.sha256(payload.encode()).hexdigest()
            try:
                publisher.send_task("bench.record", (producer, seq, payload, digest), retry=True)
            except Exception as exc:  # a refused publish is not "sent"
                print(f"producer {producer}: publish {seq} failed: {exc!r}", file=sys.stderr)
                continue
            out.write(f"{producer}:{seq}\n")
            sent += 1
            if rate:
                time.sleep(1 / rate)
    print(f"producer {producer}: {sent} sent", file=sys.stderr)


class Worker:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen | None = None
        self.kills = 0
        self.self_deaths = 0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "celery", "-A", "broker", "worker",
                    "--concurrency=1", "--without-gossip", "--without-mingle",
                    "--loglevel=WARNING",
                ],
                cwd=ROOT / "bench", env=self.env, stdout=out, stderr=subprocess.STDOUT,
                process_group=0,
            )  # fmt: skip

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.kills += 1

    def restart_if_dead(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            self.self_deaths += 1
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def run(
    broker: str,
    tasks: int,
    producers: int,
    kills: int,
    payload: int,
    rate: float,
    kill_every: float,
) -> dict:
    data = Path(tempfile.mkdtemp(prefix=f"brokerbench-{broker}-"))
    env = dict(os.environ)
    env.update(
        BENCH_BROKER=broker,
        BENCH_DATA_DIR=str(data),
        BENCH_EXECUTED=str(data / "executed.log"),
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    os.environ.update(env)  # the producers (forked below) build the same broker
    worker = Worker(env, data / "worker.log")
    worker.start()
    time.sleep(3)  # let the first worker boot before the storm
    per = tasks // producers
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=produce, args=(p, per, payload, str(data / f"sent-{p}.log"), rate))
        for p in range(producers)
    ]
    began = time.monotonic()
    for proc in procs:
        proc.start()
    # Kill the worker `kills` times while the producers publish.
    next_kill = time.monotonic() + kill_every
    while any(p.is_alive() for p in procs) or worker.kills < kills:
        time.sleep(0.05)
        worker.restart_if_dead()
        if worker.kills < kills and time.monotonic() >= next_kill:
            worker.kill()
            worker.start()
            next_kill = time.monotonic() + kill_every
    publish_seconds = time.monotonic() - began
    # Drain: wait until executions stop growing for 8 s.
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < 8 and time.monotonic() - began < 600:
        time.sleep(0.5)
        worker.restart_if_dead()
        done = len(_lines(data / "executed.log"))
        if done != last:
            last, quiet_since = done, time.monotonic()
    worker.stop()
    sent = {line for p in range(producers) for line in _lines(data / f"sent-{p}.log")}
    executed = Counter()
    bad = 0
    for line in _lines(data / "executed.log"):
        producer, seq, status = line.split(":")
        executed[f"{producer}:{seq}"] += 1
        bad += status != "ok"
    log = (data / "worker.log").read_text(errors="replace")
    result = {
        "broker": broker,
        "sent": len(sent),
        "executed": sum(executed.values()),
        "lost": len(sent - set(executed)),
        "duplicated": sum(n - 1 for n in executed.values() if n > 1),
        "corrupted": bad + log.count("JSONDecodeError"),
        "kills": worker.kills,
        "self_deaths": worker.self_deaths,
        "unrecoverable_errors": log.count("Unrecoverable error"),
        "publish_seconds": round(publish_seconds, 1),
    }
    shutil.rmtree(data, ignore_errors=True)
    return result


def torn_message(broker: str) -> str:
    """What a worker does with a message caught half-written: on the filesystem an
    empty file is the state between kombu's open() and write(); on SQLite it is an
    INSERT not yet committed. Returns what happened to the worker."""
    data = Path(tempfile.mkdtemp(prefix=f"brokerbench-torn-{broker}-"))
    env = dict(os.environ, BENCH_BROKER=broker, BENCH_DATA_DIR=str(data))
    env["BENCH_EXECUTED"] = str(data / "executed.log")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    os.environ.update(env)
    make_app().send_task("bench.record", (0, 0, "", hashlib.sha256(b"").hexdigest()))
    worker = Worker(env, data / "worker.log")
    worker.start()
    _wait_until(lambda: len(_lines(data / "executed.log")) == 1, 60)
    if broker == "filesystem":
        name = f"{int(time.monotonic() * 1000)}_{os.urandom(16).hex()}.celery.msg"
        (data / "celery-broker" / "queue" / name).touch()
        time.sleep(5)
    else:
        db = sqlite3.connect(data / "celery-broker.sqlite3", timeout=30, isolation_level=None)
        db.execute("BEGIN")
        db.execute(
            "INSERT INTO kombu_message (visible, payload, version, queue_id) "
            "SELECT 1, '{\"half', 1, id FROM kombu_queue WHERE name = 'celery'"
        )
        time.sleep(5)
        db.execute("ROLLBACK")
        db.close()
    alive = worker.proc.poll() is None
    log = (data / "worker.log").read_text(errors="replace")
    worker.stop()
    shutil.rmtree(data, ignore_errors=True)
    if alive:
        return "worker alive, nothing read"
    return f"worker exited ({'Unrecoverable error: JSONDecodeError' if 'JSONDecodeError' in log else 'other'})"


def _wait_until(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=["filesystem", "sqlite", "both"], default="both")
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--payload", type=int, default=4096, help="bytes of payload per task")
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="tasks/s per producer (0: flat out). Near the worker's pace the filesystem "
        "consumer meets files still being written; with a backlog it takes old ones.",
    )
    parser.add_argument("--kill-every", type=float, default=1.5, help="seconds between kills")
    args = parser.parse_args()
    brokers = ["filesystem", "sqlite"] if args.broker == "both" else [args.broker]
    for broker in brokers:
        print(f"torn message, {broker}: {torn_message(broker)}", flush=True)
    print("| broker | sent | executed | lost | duplicated | corrupted | kills -9 | "
          "worker self-deaths | publish s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for broker in brokers:
        r = run(
            broker, args.tasks, args.producers, args.kills, args.payload, args.rate, args.kill_every
        )
        print(
            f"| {r['broker']} | {r['sent']} | {r['executed']} | {r['lost']} | "
            f"{r['duplicated']} | {r['corrupted']} | {r['kills']} | {r['self_deaths']} | "
            f"{r['publish_seconds']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
