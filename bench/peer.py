"""ZeroLock beside etcd: the same client and the same workloads, in one run.

Run by hand (a benchmark, not a test): ``make bench-peer`` or
``.venv/bin/python bench/peer.py [--db sqlite,postgres] [--seconds 10]``.

For each configuration it installs Debian's ``etcd-server`` if it is missing, starts
etcd on free ports with a throwaway ``--data-dir``, and starts ZeroLock as ``make run``
serves (``bin/serve``) on a throwaway ``ZEROLOCK_DATA_DIR`` (bench/run.py's
``running_server``: migrate, an admin key, the rate limits lifted). Both are driven by
one client implementation (one thread and one keep-alive ``httpx.Client`` per agent, or
with ``--client httpcore`` httpx's own transport without its Client layer) and stopped
at the end, Ctrl-C included.

mixed     50 agents over 20 counters: a read, and after a quarter of the reads a write
          of value + 1 checked against the version read (80 % reads, 20 % writes).
get       GET of one value by 50 agents; ZeroLock's framework floor the same way.
commits   version-checked writes in a loop, each agent on its own key: 1 and 50 agents.
claims    80 agents walk 100 tasks, one compare-and-set per (agent, task) attempt;
          and, when the server has it, ZeroLock's ``POST /api/shards/{id}/claim``.
appends   200 appenders x 50 items, one item per request, then count what was kept.

Prints Markdown tables (ratios are ZeroLock / etcd) and writes every row to
``bench/results/peer-<config>-<UTC timestamp>.json`` (and a PNG with matplotlib).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpcore
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proctree import cmdline, cpu_seconds, pss_mb, rss_mb, tree  # noqa: E402
from run import (  # noqa: E402
    DBS,
    RESULTS_DIR,
    comma_list,
    free_port,
    log,
    percentile_ms,
    running_server,
    stop_process,
    tail,
)

ETCD = "/usr/bin/etcd"
PG_DB = "zerolock_peer"
REDIS_URL = "redis://127.0.0.1:6379/7"
REQUEST_TIMEOUT_S = 120.0
# ZeroLock's writes ask for no value back (RFC 7240); a server without support
# ignores the header. etcd's put answers carry no value either (no prev_kv).
MINIMAL = {"Prefer": "return=minimal"}
# The name of etcd's gRPC peer (--etcd-grpc) in rows, tables and plots.
GRPC_PEER = "etcd gRPC"


# --------------------------------------------------------------------------- the client


@dataclass
class Tally:
    """One agent's account of its requests (merged after the threads are done)."""

    latencies: list[float] = field(default_factory=list)
    ok: int = 0  # answered as expected, a lost compare included
    conflicts: int = 0  # a compare that failed: 409 STALE_VERSION, succeeded false
    errors: int = 0
    first_error: str | None = None

    def error(self, detail: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = detail

    def merge(self, other: Tally) -> None:
        self.latencies += other.latencies
        self.ok += other.ok
        self.conflicts += other.conflicts
        self.errors += other.errors
        self.first_error = self.first_error or other.first_error


@dataclass
class Answer:
    method: str
    path: str
    status_code: int
    content: bytes
    content_type: str

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


# What a request can fail with, short of an answer, in either transport.
TRANSPORT_ERRORS = (
    OSError,  # the socket transport's: websockets' ConnectionClosed, TimeoutError
    httpx.HTTPError,
    httpcore.NetworkError,
    httpcore.TimeoutException,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    httpcore.ConnectionNotAvailable,
)


class Client:
    """One agent's keep-alive connection to a peer: the one client both peers get.

    ``httpx``: an ``httpx.Client`` (``verify=False``: the peers are on plain http, and
    loading the CA bundle cost 45 ms of CPU per client). ``httpcore``: the connection
    pool httpx itself sends through, without httpx's Client layer (URL merging, cookies,
    auth, hooks): 15-25 % less client CPU per request under 50 threads here, half in
    a one-thread probe, so less of the machine goes to the load generator."""

    def __init__(self, kind: str, base_url: str, headers: dict[str, str]) -> None:
        self.kind, self.base_url = kind, base_url
        timeout = REQUEST_TIMEOUT_S
        if kind == "httpx":
            self._httpx = httpx.Client(
                base_url=base_url, headers=headers, timeout=timeout, verify=False
            )
        else:
            self._pool = httpcore.ConnectionPool(max_connections=1)
            self._headers = [(k.encode(), v.encode()) for k, v in headers.items()]
            self._timeouts = {
                "timeout": dict.fromkeys(("connect", "read", "write", "pool"), timeout)
            }

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Answer:
        if self.kind == "httpx":
            r = self._httpx.request(method, path, json=body, headers=headers)
            return Answer(method, path, r.status_code, r.content, r.headers.get("content-type", ""))
        sent = list(self._headers)
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            sent.append((b"Content-Type", b"application/json"))
        sent += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        response = self._pool.request(
            method, self.base_url + path, headers=sent, content=content, extensions=self._timeouts
        )
        content_type = next(
            (v.decode() for k, v in response.headers if k.lower() == b"content-type"), ""
        )
        return Answer(method, path, response.status, response.content, content_type)

    def close(self) -> None:
        if self.kind == "httpx":
            self._httpx.close()
        else:
            self._pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SocketClient:
    """One agent's ``/ws/agents/`` socket, carrying the REST API as request frames
    (docs/api.md, /ws/agents/): the transport an agent that already holds its push
    socket would use. One request in flight at a time, like the HTTP clients, so
    the two transports do the same work per agent; pushes are skipped."""

    kind = "ws"

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        from websockets.sync.client import connect

        ws_url = "ws" + base_url.removeprefix("http") + "/ws/agents/"
        self._conn = connect(
            ws_url,
            additional_headers=headers,
            open_timeout=REQUEST_TIMEOUT_S,
            max_size=None,
            compression=None,  # as the HTTP clients: no compression either side
        )
        self._next = 0

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Answer:
        self._next += 1
        frame: dict[str, Any] = {
            "type": "request",
            "id": self._next,
            "method": method,
            "path": path,
        }
        if body is not None:
            frame["body"] = body
        if headers:
            frame["headers"] = headers
        self._conn.send(json.dumps(frame))
        while True:
            got = json.loads(self._conn.recv(timeout=REQUEST_TIMEOUT_S))
            if got.get("type") == "response" and got.get("id") == self._next:
                break
            if got.get("type") == "error":
                raise httpcore.ProtocolError(f"error frame: {got}")
        content = b"" if got.get("body") is None else json.dumps(got["body"]).encode()
        return Answer(method, path, int(got["status"]), content, "application/json")

    def ping(self) -> Answer:
        """The socket's own floor: a ``ping`` frame answered by ``pong`` in the
        consumer, with no Django handler, thread hop or database behind it."""
        self._conn.send('{"type": "ping"}')
        while True:
            got = json.loads(self._conn.recv(timeout=REQUEST_TIMEOUT_S))
            if got.get("type") == "pong":
                return Answer("WS", "ping", 200, b"", "application/json")
            if got.get("type") == "error":
                raise httpcore.ProtocolError(f"error frame: {got}")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> SocketClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Call:
    """One agent's timed requests through its own client. Both peers go through here."""

    def __init__(self, client: Client | SocketClient, tally: Tally) -> None:
        self.client, self.tally = client, tally

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Answer | None:
        return self._timed(
            f"{method} {path}", lambda: self.client.request(method, path, body, headers)
        )

    def ping(self) -> Answer | None:
        """A timed ping frame (SocketClient only)."""
        assert isinstance(self.client, SocketClient)
        return self._timed("ping", self.client.ping)

    def _timed(self, what: str, send: Callable[[], Answer]) -> Answer | None:
        start = time.perf_counter()
        try:
            answer = send()
        except TRANSPORT_ERRORS as exc:
            self.tally.latencies.append(time.perf_counter() - start)
            self.tally.error(f"{what}: {type(exc).__name__}: {exc}")
            time.sleep(0.05)  # don't spin on a server that is gone
            return None
        self.tally.latencies.append(time.perf_counter() - start)
        return answer

    def unexpected(self, answer: Answer) -> None:
        self.tally.error(
            f"{answer.method} {answer.path} -> {answer.status_code}: {answer.text[:500]}"
        )


def untimed(client: Client, method: str, path: str, body: Any = None) -> Any:
    """Set-up and final-state requests: not timed, and any failure stops the run."""
    answer = client.request(method, path, body)
    if answer.status_code >= 300:
        raise RuntimeError(f"{method} {path} -> {answer.status_code}: {answer.text[:1000]}")
    return answer.json()


# --------------------------------------------------------------------------- the peers


# A task in the final state: (claimed, its holder if the store names one).
Holder = tuple[bool, str | None]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def prefix_end(prefix: str) -> str:
    """etcd's range_end for every key starting with prefix."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class Etcd:
    """etcd through its JSON gRPC gateway (/v3/kv/...; keys and values base64), or,
    with the client kind ``grpc``, through gRPC itself (bench/etcd_grpc.py: the
    same calls, answered in the gateway's JSON)."""

    def __init__(self, url: str, pid: int, client_kind: str, name: str = "etcd") -> None:
        self.url, self.pid, self.client_kind, self.name = url, pid, client_kind, name

    def client(self, agent: str) -> Client:
        if self.client_kind == "grpc":
            from etcd_grpc import GrpcClient

            return GrpcClient(self.url)  # type: ignore[return-value]  # Client's interface
        return Client(self.client_kind, self.url, {})

    def make_counters(self, c: Client, run: str, n: int) -> list[tuple[str, int]]:
        made = []
        for i in range(n):
            key = f"peer/{run}/counter/{i}"
            answer = untimed(c, "POST", "/v3/kv/put", {"key": b64(key), "value": b64("0")})
            made.append((key, int(answer["header"]["revision"])))
        return made

    def read(self, call: Call, key: str) -> tuple[int, int] | None:
        r = call.request("POST", "/v3/kv/range", {"key": b64(key)})
        if r is None:
            return None
        if r.status_code != 200:
            call.unexpected(r)
            return None
        kv = r.json()["kvs"][0]
        return int(kv["mod_revision"]), int(unb64(kv["value"]))

    def write(self, call: Call, key: str, version: int, value: int) -> tuple[bool, int] | None:
        """Put value if the key's mod_revision is still version: (won, version to expect
        next). A put's revision is the key's new mod_revision."""
        body = {
            "compare": [
                {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": version}
            ],
            "success": [{"request_put": {"key": b64(key), "value": b64(str(value))}}],
        }
        r = call.request("POST", "/v3/kv/txn", body)
        if r is None:
            return None
        if r.status_code != 200:
            call.unexpected(r)
            return None
        answer = r.json()
        if answer.get("succeeded"):  # the gateway leaves a false out
            return True, int(answer["header"]["revision"])
        return False, version

    def values(self, c: Client, keys: list[str]) -> list[int]:
        out = []
        for key in keys:
            kv = untimed(c, "POST", "/v3/kv/range", {"key": b64(key)})["kvs"][0]
            out.append(int(unb64(kv["value"])))
        return out

    def make_queue(self, c: Client, run: str, tasks: list[str]) -> str:
        prefix = f"peer/{run}/tasks/"
        for task in tasks:
            untimed(c, "POST", "/v3/kv/put", {"key": b64(prefix + task), "value": b64("pending")})
        return prefix

    def try_claim(self, call: Call, queue: str, task: str, agent: str) -> bool | None:
        key = b64(queue + task)
        body = {
            "compare": [
                {"key": key, "target": "VALUE", "result": "EQUAL", "value": b64("pending")}
            ],
            "success": [{"request_put": {"key": key, "value": b64(f"claimed:{agent}")}}],
        }
        r = call.request("POST", "/v3/kv/txn", body)
        if r is None:
            return None
        if r.status_code != 200:
            call.unexpected(r)
            return None
        return bool(r.json().get("succeeded"))

    def holders(self, c: Client, queue: str) -> dict[str, Holder]:
        answer = untimed(
            c, "POST", "/v3/kv/range", {"key": b64(queue), "range_end": b64(prefix_end(queue))}
        )
        out: dict[str, Holder] = {}
        for kv in answer.get("kvs", []):
            value = unb64(kv["value"])
            claimed = value.startswith("claimed:")
            out[unb64(kv["key"])[len(queue) :]] = (
                claimed,
                value.split(":", 1)[1] if claimed else None,
            )
        return out

    def make_log(self, c: Client, run: str) -> str:
        return f"peer/{run}/log/"

    def append(self, call: Call, log_id: str, item: str) -> bool | None:
        """An append is a put of a key of its own under the log's prefix."""
        r = call.request("POST", "/v3/kv/put", {"key": b64(log_id + item), "value": b64(item)})
        if r is None:
            return None
        if r.status_code != 200:
            call.unexpected(r)
            return None
        return True

    def log_items(self, c: Client, log_id: str) -> list[str]:
        answer = untimed(
            c,
            "POST",
            "/v3/kv/range",
            {"key": b64(log_id), "range_end": b64(prefix_end(log_id)), "keys_only": True},
        )
        return [unb64(kv["key"])[len(log_id) :] for kv in answer.get("kvs", [])]


class ZeroLock:
    """ZeroLock's REST API, as bin/serve serves it."""

    name = "ZeroLock"

    def __init__(
        self,
        url: str,
        pid: int,
        api_key: str,
        client_kind: str,
        transport: str = "http",
        keyed: bool = False,
    ) -> None:
        self.url, self.pid, self.api_key, self.client_kind = url, pid, api_key, client_kind
        self.transport, self.keyed = transport, keyed

    def write_headers(self) -> dict[str, str]:
        """A timed write's headers: the minimal answer, and with --idempotency-keys
        a fresh Idempotency-Key, as the SDK sends on every write."""
        if not self.keyed:
            return MINIMAL
        return {**MINIMAL, "Idempotency-Key": uuid.uuid4().hex}

    def client(self, agent: str) -> Client | SocketClient:
        headers = {"X-API-Key": self.api_key, "X-Agent-Id": agent}
        if self.transport == "ws":
            return SocketClient(self.url, headers)
        return Client(self.client_kind, self.url, headers)

    def make_counters(self, c: Client, run: str, n: int) -> list[tuple[str, int]]:
        made = []
        for i in range(n):
            shard_id = f"peer-{run}-counter-{i}"
            body = {"id": shard_id, "type": "decision", "initial_value": 0}
            made.append((shard_id, int(untimed(c, "POST", "/api/shards", body)["version"])))
        return made

    def read(self, call: Call, key: str) -> tuple[int, int] | None:
        r = call.request("GET", f"/api/shards/{key}")
        if r is None:
            return None
        if r.status_code != 200:
            call.unexpected(r)
            return None
        shard = r.json()
        return int(shard["version"]), int(shard["value"])

    def write(self, call: Call, key: str, version: int, value: int) -> tuple[bool, int] | None:
        body = {"expected_version": version, "new_value": value}
        r = call.request("POST", f"/api/shards/{key}/commit", body, self.write_headers())
        if r is None:
            return None
        if r.status_code == 200:
            return True, int(r.json()["version"])
        if r.status_code == 409:
            error = r.json().get("error", {})
            if error.get("code") == "STALE_VERSION":
                return False, int(error["current_version"])
        call.unexpected(r)
        return None

    def values(self, c: Client, keys: list[str]) -> list[int]:
        return [int(untimed(c, "GET", f"/api/shards/{key}")["value"]) for key in keys]

    def make_queue(self, c: Client, run: str, tasks: list[str]) -> str:
        shard_id = f"peer-{run}-tasks"
        body = {
            "id": shard_id,
            "type": "decision",
            "initial_value": {t: {"status": "pending"} for t in tasks},
        }
        untimed(c, "POST", "/api/shards", body)
        return shard_id

    def try_claim(self, call: Call, queue: str, task: str, agent: str) -> bool | None:
        """One transaction: the task's status compared, the task put (bench/claims.py)."""
        body = {
            "compare": [
                {"shard_id": queue, "path": [task, "status"], "op": "==", "value": "pending"}
            ],
            "success": [
                {
                    "op": "put",
                    "shard_id": queue,
                    "path": [task],
                    "value": {"status": "claimed", "holder": agent},
                }
            ],
            "failure": [],
        }
        r = call.request("POST", "/api/txn", body, self.write_headers())
        if r is None:
            return None
        if r.status_code != 200:
            call.unexpected(r)
            return None
        return bool(r.json()["succeeded"])

    def holders(self, c: Client, queue: str) -> dict[str, Holder]:
        value = untimed(c, "GET", f"/api/shards/{queue}")["value"]
        return {
            task: (entry.get("status") != "pending", entry.get("holder"))
            for task, entry in value.items()
        }

    def make_log(self, c: Client, run: str) -> str:
        shard_id = f"peer-{run}-log"
        untimed(
            c, "POST", "/api/shards", {"id": shard_id, "type": "additive", "crdt_type": "array"}
        )
        return shard_id

    def append(self, call: Call, log_id: str, item: str) -> bool | None:
        r = call.request(
            "POST", f"/api/shards/{log_id}/commit", {"append": [item]}, self.write_headers()
        )
        if r is None:
            return None
        if r.status_code != 200:
            call.unexpected(r)
            return None
        return True

    def log_items(self, c: Client, log_id: str) -> list[str]:
        return [str(item) for item in untimed(c, "GET", f"/api/shards/{log_id}")["value"]]

    # ZeroLock only

    def floor(self, call: Call) -> bool | None:
        # Over HTTP the floor view; over the socket (where only /api/ paths may be
        # requested) a ping frame, the least the socket answers.
        r = (
            call.ping()
            if isinstance(call.client, SocketClient)
            else call.request("GET", "/bench/floor")
        )
        if r is None:
            return None
        if r.status_code != 200:
            call.unexpected(r)
            return None
        return True

    def has_claim(self, c: Client, run: str) -> tuple[bool, str]:
        """Whether POST /api/shards/{id}/claim exists: asked of a queue with nothing to
        claim, it answers 404 NOTHING_TO_CLAIM; without the route, 404 or 405 otherwise."""
        shard_id = f"peer-{run}-probe"
        body = {"id": shard_id, "type": "decision", "initial_value": {"t": {"status": "done"}}}
        untimed(c, "POST", "/api/shards", body)
        r = c.request("POST", f"/api/shards/{shard_id}/claim", claim_body())
        code = _error_code(r)
        return r.status_code == 404 and code == "NOTHING_TO_CLAIM", f"{r.status_code} {code}"

    def claim_next(self, call: Call, queue: str) -> str | None | bool:
        """The claimed task's id; None when nothing is left to claim; False on an error."""
        r = call.request("POST", f"/api/shards/{queue}/claim", claim_body(), MINIMAL)
        if r is None:
            return False
        if r.status_code == 200:
            answer = r.json()
            task = answer.get("task_id") or answer.get("id")
            if task is None:
                call.tally.error(f"claim answer without a task id: {r.text[:300]}")
                return False
            return str(task)
        if r.status_code == 404 and _error_code(r) == "NOTHING_TO_CLAIM":
            return None
        call.unexpected(r)
        return False


def claim_body() -> dict[str, Any]:
    return {"where": {"status": "pending"}, "set": {"status": "claimed"}}


def _error_code(r: Answer) -> str | None:
    """The error envelope's code, if the answer is one."""
    if not r.content_type.startswith("application/json"):
        return None
    error = r.json().get("error")
    return error.get("code") if isinstance(error, dict) else None


Peer = Etcd | ZeroLock


# --------------------------------------------------------------------------- running


def ensure_etcd() -> str:
    """Debian's etcd-server, installed with apt-get if it is missing."""
    found = shutil.which("etcd") or (ETCD if os.path.exists(ETCD) else None)
    if found:
        return found
    log("etcd is missing: apt-get install -y etcd-server")
    install = ["apt-get", "install", "-y", "-q", "etcd-server"]
    if subprocess.run(install, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        subprocess.run(install, check=True, capture_output=True)
    return shutil.which("etcd") or ETCD


@contextlib.contextmanager
def running_etcd(keep_data: bool, client_kind: str) -> Iterator[Etcd]:
    """etcd on free ports and a throwaway data dir, one member, stopped however the
    block ends. It fsyncs its WAL on every write, its default."""
    binary = ensure_etcd()
    data_dir = tempfile.mkdtemp(prefix="zerolock-peer-etcd-")
    client_url = f"http://127.0.0.1:{free_port()}"
    peer_url = f"http://127.0.0.1:{free_port()}"
    log_path = Path(data_dir) / "etcd.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                [
                    binary,
                    "--name=peer-bench",
                    f"--data-dir={data_dir}/member",
                    f"--listen-client-urls={client_url}",
                    f"--advertise-client-urls={client_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=peer-bench={peer_url}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{client_url}/health", timeout=2).json().get("health") == "true":
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not start:\n{tail(log_path)}")
            time.sleep(0.2)
        version = httpx.get(f"{client_url}/version", timeout=2).json().get("etcdserver")
        log(f"etcd {version} is up on {client_url} (data {data_dir})")
        yield Etcd(client_url, proc.pid, client_kind)
    finally:
        if proc is not None:
            log(f"stopping etcd (pid {proc.pid})")
            stop_process(proc)
        if keep_data:
            log(f"kept etcd data dir {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.contextmanager
def running_zerolock(
    db: str,
    keep_data: bool,
    client_kind: str,
    web_server: str = "uvicorn",
    transport: str = "http",
    keyed: bool = False,
) -> Iterator[ZeroLock]:
    if db == "postgres":
        import redis  # a dependency of ZeroLock's own

        redis.Redis.from_url(REDIS_URL).flushdb()  # db 7 is this bench's own
    with running_server(
        "serve",
        db,
        keep_data,
        pg_db=PG_DB,
        redis_url=REDIS_URL,
        extra_env={"ZEROLOCK_BENCH_FLOOR": "true", "ZEROLOCK_SERVER": web_server},
    ) as server:
        yield ZeroLock(server.url, server.proc.pid, server.api_key, client_kind, transport, keyed)


class Watch:
    """A peer's process tree while a workload runs: CPU seconds it used, its peak
    memory (sampled every 0.2 s), and this client process's own CPU seconds."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_total = self.peak_web = self.peak_pss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _cpu(self) -> float:
        return sum(cpu_seconds(p) for p in tree(self.pid))

    def _sample(self) -> None:
        while True:  # once at the start, every 0.2 s, and once at the end
            self._measure()
            if self._stop.wait(0.2):
                self._measure()
                return

    def _measure(self) -> None:
        pids = tree(self.pid)
        sizes = [(rss_mb(p), p) for p in pids]
        total = sum(s for s, _ in sizes)
        self.peak_pss = max(self.peak_pss, sum(pss_mb(p) for p in pids))
        # The web server alone: Daphne or uvicorn (bin/serve's worker and beat are
        # the rest); etcd is one process.
        web = sum(s for s, p in sizes if any(w in cmdline(p) for w in WEB_SERVERS)) or total
        self.peak_total = max(self.peak_total, total)
        self.peak_web = max(self.peak_web, web)

    def begin(self) -> None:
        """The CPU counters at the start, read by the start barrier's action, before
        any agent is released: read after it, behind 200 busy agent threads for the
        GIL, they came late and a short run's CPU was mostly missed (etcd's appends
        showed 0.1 s of client CPU for 10,000 requests)."""
        self.server_cpu0, self.client_cpu0 = self._cpu(), time.process_time()

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.server_cpu = self._cpu() - self.server_cpu0
        self.client_cpu = time.process_time() - self.client_cpu0


STOP = threading.Event()  # set on Ctrl-C: every agent ends after its request in flight

Body = Callable[[int, Call, float], None]  # (agent index, its Call, deadline)


def swarm(
    peer: Peer, workload: str, agents: int, body: Body, seconds: float | None
) -> dict[str, Any]:
    """Runs body in `agents` threads, each with its own client, started together; with
    seconds, until that deadline, else until every body returns. Returns the merged
    tally's figures and what the peer's processes and this client used meanwhile."""
    tallies = [Tally() for _ in range(agents)]
    start = [0.0]
    watch = Watch(peer.pid)

    def started() -> None:  # the barrier's action: before any agent is released
        watch.begin()
        start[0] = time.perf_counter()

    barrier = threading.Barrier(agents + 1, action=started)

    def agent(index: int) -> None:
        try:
            client = peer.client(f"agent-{index}")
        except BaseException:
            barrier.abort()  # the run cannot start: don't leave the others waiting
            raise
        with client:
            barrier.wait()
            deadline = start[0] + seconds if seconds else math.inf
            try:
                body(index, Call(client, tallies[index]), deadline)
            except Exception as exc:  # a bug or a malformed answer: counted, not hidden
                tallies[index].error(f"agent-{index} stopped: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(agents)]
    for thread in threads:
        thread.start()
    barrier.wait()  # every client made: what is measured is the requests
    with watch:
        try:
            for thread in threads:
                while thread.is_alive():  # joined in slices: Ctrl-C reaches this thread
                    thread.join(0.2)
        except KeyboardInterrupt:
            STOP.set()  # the agents stop before the servers are
            raise
        elapsed = time.perf_counter() - start[0]
    total = Tally()
    for tally in tallies:
        total.merge(tally)
    if total.first_error:
        log(f"  {peer.name} {workload}: {total.errors} errors; first: {total.first_error}")
    return {
        "workload": workload,
        "peer": peer.name,
        "agents": agents,
        "seconds": round(elapsed, 3),
        "requests": len(total.latencies),
        "ok": total.ok,
        "ops_per_s": total.ok / elapsed,
        "conflicts": total.conflicts,
        "p50_ms": percentile_ms(total.latencies, 50),
        "p99_ms": percentile_ms(total.latencies, 99),
        "errors": total.errors,
        "first_error": total.first_error,
        "client_cpu_s": round(watch.client_cpu, 2),
        "server_cpu_s": round(watch.server_cpu, 2),
        "server_peak_rss_mb": round(watch.peak_total, 1),
        "server_peak_rss_web_mb": round(watch.peak_web, 1),
        "server_peak_pss_mb": round(watch.peak_pss, 1),
    }


def running(deadline: float) -> bool:
    return not STOP.is_set() and time.perf_counter() < deadline


# --------------------------------------------------------------------------- workloads


def mixed(peer: Peer, run: str, agents: int, seconds: float, counters: int) -> dict[str, Any]:
    """Read a random counter; after a quarter of the reads, write value + 1 checked
    against the version read. 80 % of requests are reads, 20 % writes."""
    with peer.client("setup") as c:
        keys = [k for k, _ in peer.make_counters(c, run, counters)]
    wins = Counter[int]()

    def body(index: int, call: Call, deadline: float) -> None:
        rng = random.Random(index)
        while running(deadline):
            key = rng.choice(keys)
            read = peer.read(call, key)
            if read is None:
                continue
            call.tally.ok += 1
            if rng.random() < 0.25:
                version, value = read
                written = peer.write(call, key, version, value + 1)
                if written is None:
                    continue
                call.tally.ok += 1
                if written[0]:
                    wins[index] += 1
                else:
                    call.tally.conflicts += 1

    row = swarm(peer, "mixed", agents, body, seconds)
    with peer.client("check") as c:
        kept = sum(peer.values(c, keys))
    row["writes_won"] = sum(wins.values())
    row["lost_updates"] = row["writes_won"] - kept  # every won write is one increment
    return row


def get_one(peer: Peer, run: str, agents: int, seconds: float) -> dict[str, Any]:
    with peer.client("setup") as c:
        [(key, _)] = peer.make_counters(c, run, 1)

    def body(index: int, call: Call, deadline: float) -> None:
        while running(deadline):
            if peer.read(call, key) is not None:
                call.tally.ok += 1

    return swarm(peer, "get", agents, body, seconds)


def floor(peer: ZeroLock, agents: int, seconds: float) -> dict[str, Any]:
    def body(index: int, call: Call, deadline: float) -> None:
        while running(deadline):
            if peer.floor(call):
                call.tally.ok += 1

    return swarm(peer, "floor", agents, body, seconds)


def commits(peer: Peer, run: str, agents: int, seconds: float) -> dict[str, Any]:
    """Each agent writes its own key in a loop, expecting the version its last write
    returned; a conflict here would be an error."""
    with peer.client("setup") as c:
        own = peer.make_counters(c, run, agents)

    def body(index: int, call: Call, deadline: float) -> None:
        key, version = own[index]
        value = 0
        while running(deadline):
            written = peer.write(call, key, version, value + 1)
            if written is None:
                continue
            won, version = written
            if won:
                call.tally.ok += 1
                value += 1
            else:
                call.tally.error(f"own key {key} was stale at {version}")

    return swarm(peer, f"commits-{agents}", agents, body, seconds)


def claims(peer: Peer, run: str, agents: int, tasks: int) -> dict[str, Any]:
    """Every agent walks every task once, from its own starting point (spread like
    bench/claims.py), with one compare-and-set per attempt: agents x tasks attempts."""
    names = [f"t{n:03}" for n in range(tasks)]
    with peer.client("setup") as c:
        queue = peer.make_queue(c, run, names)
    believed: dict[str, list[str]] = {t: [] for t in names}
    lock = threading.Lock()

    def body(index: int, call: Call, deadline: float) -> None:
        agent = f"agent-{index}"
        start = index * tasks // agents
        for task in names[start:] + names[:start]:
            if STOP.is_set():
                return
            won = peer.try_claim(call, queue, task, agent)
            if won is None:
                continue
            call.tally.ok += 1
            if won:
                with lock:
                    believed[task].append(agent)
            else:
                call.tally.conflicts += 1

    row = swarm(peer, "claims-cas", agents, body, None)
    with peer.client("check") as c:
        final = peer.holders(c, queue)
    return row | claim_verdict(believed, final, row["requests"])


def claims_next(peer: ZeroLock, run: str, agents: int, tasks: int) -> dict[str, Any]:
    """Every agent asks POST /api/shards/{id}/claim for any pending task until the
    server says there is nothing left."""
    names = [f"t{n:03}" for n in range(tasks)]
    with peer.client("setup") as c:
        queue = peer.make_queue(c, run, names)
    believed: dict[str, list[str]] = {t: [] for t in names}
    lock = threading.Lock()
    told_empty = [0] * agents  # the one NOTHING_TO_CLAIM that ends each agent

    def body(index: int, call: Call, deadline: float) -> None:
        agent, failures = f"agent-{index}", 0
        while not STOP.is_set() and failures < 3:
            task = peer.claim_next(call, queue)
            if task is False:
                failures += 1
                continue
            call.tally.ok += 1
            if task is None:
                told_empty[index] += 1
                return
            with lock:
                believed.setdefault(str(task), []).append(agent)

    row = swarm(peer, "claims-claim", agents, body, None)
    with peer.client("check") as c:
        final = peer.holders(c, queue)
    verdict = claim_verdict(believed, final, row["requests"])
    claimed = verdict["claimed"]
    verdict["nothing_to_claim_answers"] = sum(told_empty)
    verdict["requests_per_task_before_empty"] = (
        (row["requests"] - sum(told_empty)) / claimed if claimed else math.nan
    )
    return row | verdict


def claim_verdict(
    believed: dict[str, list[str]], final: dict[str, Holder], requests: int
) -> dict[str, Any]:
    """What the agents were told they won against what the store holds at the end."""
    claimed = sum(1 for done, _ in final.values() if done)
    return {
        "tasks": len(final),
        "claimed": claimed,
        "unclaimed": len(final) - claimed,
        # A task two agents were each told they won.
        "duplicates": sum(len(h) - 1 for h in believed.values() if len(h) > 1),
        # A claimed task no agent was told it won, or held by another than the one
        # that was (when the store names a holder).
        "wrong_holder": sum(
            1
            for task, (done, holder) in final.items()
            if done
            and (not believed.get(task) or (holder is not None and believed[task] != [holder]))
        ),
        "requests_per_task": requests / claimed if claimed else math.nan,
    }


def appends(peer: Peer, run: str, appenders: int, items: int) -> dict[str, Any]:
    with peer.client("setup") as c:
        log_id = peer.make_log(c, run)

    def body(index: int, call: Call, deadline: float) -> None:
        for i in range(items):
            if STOP.is_set():
                return
            if peer.append(call, log_id, f"{index:03}-{i:03}"):
                call.tally.ok += 1

    row = swarm(peer, "appends", appenders, body, None)
    with peer.client("check") as c:
        kept = peer.log_items(c, log_id)
    row["items_expected"] = appenders * items
    row["items_kept"] = len(kept)
    row["items_lost"] = appenders * items - len(set(kept))
    row["items_duplicated"] = len(kept) - len(set(kept))
    return row


# --------------------------------------------------------------------------- the report


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def summary(
    rows: list[dict[str, Any]], args: argparse.Namespace, etcd: str = "etcd"
) -> list[dict[str, Any]]:
    """The Targets table's measures (issue 27's targets where it sets one, issue 13's elsewhere):
    one line each, etcd | ZeroLock | ZeroLock / etcd;
    ``etcd`` names which of etcd's paths (the JSON gateway, or gRPC)."""
    by = {(r["workload"], r["peer"]): r for r in rows}

    def pick(workload: str, peer: str, key: str) -> Any:
        row = by.get((workload, peer))
        return None if row is None else row.get(key)

    lines: list[dict[str, Any]] = []

    def line(
        measure: str,
        etcd: Any,
        zerolock: Any,
        target: str = "",
        digits: int = 1,
        compare: bool = True,
    ) -> None:
        lines.append(
            {
                "measure": measure,
                "etcd": etcd,
                "ZeroLock": zerolock,
                "ratio": ratio(zerolock, etcd) if compare else None,
                "target": target,
                "digits": digits,
            }
        )

    def both(workload: str, key: str) -> tuple[Any, Any]:
        return pick(workload, etcd, key), pick(workload, "ZeroLock", key)

    a = args.agents
    line(
        f"mixed 80/20, {a} agents, {args.counters} counters: ops/s",
        *both("mixed", "ops_per_s"),
        "≥ 1.0x",
    )
    line("mixed: p50 ms", *both("mixed", "p50_ms"))
    line("mixed: p99 ms", *both("mixed", "p99_ms"), "≤ 1.0x")
    line("mixed: lost updates", *both("mixed", "lost_updates"), "0", 0, False)
    c, t = args.claimants, args.tasks
    line(
        f"claims, {c} agents x {t} tasks, CAS per attempt: wall s",
        *both("claims-cas", "seconds"),
        "≤ 1.5x",
        2,
    )
    line("claims, CAS: requests per claimed task", *both("claims-cas", "requests_per_task"), "", 2)
    line("claims, CAS: duplicates", *both("claims-cas", "duplicates"), "0", 0, False)
    if ("claims-claim", "ZeroLock") in by:
        etcd_wall = pick("claims-cas", etcd, "seconds")
        line(
            "claims, `claim` endpoint: wall s (etcd: CAS)",
            etcd_wall,
            pick("claims-claim", "ZeroLock", "seconds"),
            "≤ 1.5x",
            2,
        )
        line(
            "claims, `claim`: requests per claimed task",
            None,
            pick("claims-claim", "ZeroLock", "requests_per_task"),
            "≤ 1.05",
            2,
        )
        line(
            "claims, `claim`: the same, less each agent's final NOTHING_TO_CLAIM",
            None,
            pick("claims-claim", "ZeroLock", "requests_per_task_before_empty"),
            "",
            2,
        )
        line(
            "claims, `claim`: duplicates",
            None,
            pick("claims-claim", "ZeroLock", "duplicates"),
            "0",
            0,
            False,
        )
    line(f"GET of one value, {a} agents: req/s", *both("get", "ops_per_s"))
    floor_rate = pick("floor", "ZeroLock", "ops_per_s")
    floor_name = (
        "socket floor (ping frames)" if args.transport == "ws" else "framework floor (/bench/floor)"
    )
    line(f"{floor_name}, {a} agents: req/s", None, floor_rate)
    line(
        "GET of one shard / framework floor",
        None,
        ratio(pick("get", "ZeroLock", "ops_per_s"), floor_rate),
        "≥ 0.5",
        2,
    )
    line("commits/s, 1 agent", *both("commits-1", "ops_per_s"))
    line(f"commits/s, {a} agents on their own keys", *both(f"commits-{a}", "ops_per_s"))
    line(
        f"commits/s scaling, {a} agents / 1",
        ratio(pick(f"commits-{a}", etcd, "ops_per_s"), pick("commits-1", etcd, "ops_per_s")),
        ratio(
            pick(f"commits-{a}", "ZeroLock", "ops_per_s"),
            pick("commits-1", "ZeroLock", "ops_per_s"),
        ),
        "≥ 3 (ZeroLock)",
        2,
        False,
    )
    n = args.appenders * args.append_items
    line(
        f"{args.appenders} appenders x {args.append_items} items: appends/s",
        *both("appends", "ops_per_s"),
        "≥ 1,000 (ZeroLock)",
    )
    line(f"appends: items lost of {n:,}", *both("appends", "items_lost"), "0", 0, False)
    line(
        "appends: server peak RSS MB (whole tree)",
        *both("appends", "server_peak_rss_mb"),
        "< 400 (ZeroLock)",
    )
    line("appends: server peak RSS MB (web process)", *both("appends", "server_peak_rss_web_mb"))
    line(
        "appends: server peak PSS MB (whole tree, shared pages once)",
        *both("appends", "server_peak_pss_mb"),
    )
    return lines


def summary_markdown(lines: list[dict[str, Any]], etcd: str = "etcd") -> str:
    out = [f"| measure | {etcd} | ZeroLock | ZeroLock / {etcd} | target |", "|---|---|---|---|---|"]
    for ln in lines:
        r = ln["ratio"]
        out.append(
            f"| {ln['measure']} | {fmt(ln['etcd'], ln['digits'])} "
            f"| {fmt(ln['ZeroLock'], ln['digits'])} | {'-' if r is None else f'{r:.2f}x'} "
            f"| {ln['target']} |"
        )
    return "\n".join(out)


def cpu_markdown(rows: list[dict[str, Any]]) -> str:
    """Where the machine's CPU went in each workload: is the client the bottleneck?"""
    out = [
        "| workload | peer | wall s | requests | errors | client CPU s | server CPU s "
        "| client % of wall | server % of wall | client CPU ms/request | server CPU ms/request |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        wall = r["seconds"] or math.nan
        n = r["requests"] or math.nan
        out.append(
            f"| {r['workload']} | {r['peer']} | {fmt(r['seconds'], 1)} | {fmt(r['requests'])} "
            f"| {fmt(r['errors'])} | {fmt(r['client_cpu_s'], 1)} | {fmt(r['server_cpu_s'], 1)} "
            f"| {fmt(100 * r['client_cpu_s'] / wall, 0)} | {fmt(100 * r['server_cpu_s'] / wall, 0)} "
            f"| {fmt(1000 * r['client_cpu_s'] / n, 2)} | {fmt(1000 * r['server_cpu_s'] / n, 2)} |"
        )
    return "\n".join(out)


def jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value


def plot(rows: list[dict[str, Any]], config: str, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # optional: no matplotlib, no plot
        return False
    panels = [
        ("mixed", "ops_per_s", "mixed 80/20: ops/s"),
        ("mixed", "p99_ms", "mixed 80/20: p99 ms (lower is better)"),
        ("claims", "seconds", "claims: wall s (lower is better)"),
        ("get", "ops_per_s", "GET one value / floor: req/s"),
        ("commits", "ops_per_s", "commits/s on own keys"),
        ("appends", "ops_per_s", "appends/s"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 4), squeeze=False)
    colors = {"etcd": "#4c72b0", GRPC_PEER: "#55a868", "ZeroLock": "#dd8452"}
    for ax, (prefix, key, title) in zip(axes[0], panels, strict=True):
        chosen = [
            r
            for r in rows
            if r["workload"] == prefix
            or r["workload"].startswith(prefix + "-")
            or (prefix == "get" and r["workload"] == "floor")
        ]
        labels = [f"{r['peer']}\n{r['workload']}" for r in chosen]
        values = [r.get(key) or 0 for r in chosen]
        ax.bar(labels, values, color=[colors.get(r["peer"], "#888") for r in chosen])
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=7, rotation=45)
    fig.suptitle(f"ZeroLock beside etcd ({config})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- main


def run_config(db: str, args: argparse.Namespace, stamp: str) -> list[dict[str, Any]]:
    """Every workload against both peers, etcd then ZeroLock each time, so the two
    share the machine's state as closely as one run allows."""
    rows: list[dict[str, Any]] = []
    with (
        running_etcd(args.keep_data, args.client) as etcd,
        running_zerolock(
            db, args.keep_data, args.client, args.server, args.transport, args.idempotency_keys
        ) as zl,
    ):
        peers: list[Peer] = [etcd, zl]
        if args.etcd_grpc:
            # etcd's native client path, on the same member: gRPC and the gateway
            # share its client port.
            peers.insert(1, Etcd(etcd.url, etcd.pid, "grpc", name=GRPC_PEER))
        with zl.client("probe") as c:
            has_claim, answer = zl.has_claim(c, stamp)
        log(f"POST /api/shards/{{id}}/claim: {'present' if has_claim else 'absent'} ({answer})")

        def record(row: dict[str, Any]) -> None:
            rows.append(row)
            log(
                f"  {row['peer']:8} {row['workload']:13} {row['ops_per_s']:8.1f} ok/s  "
                f"p99 {row['p99_ms']:7.1f} ms  {row['seconds']:6.1f} s  "
                f"{row['errors']} errors  client CPU {row['client_cpu_s']} s, "
                f"server CPU {row['server_cpu_s']} s"
            )

        steps: list[tuple[str, Callable[[Peer, str], dict[str, Any] | None]]] = [
            ("mixed", lambda p, r: mixed(p, r, args.agents, args.seconds, args.counters)),
            ("get", lambda p, r: get_one(p, r, args.agents, args.seconds)),
            (
                "floor",
                lambda p, r: (
                    floor(p, args.agents, args.seconds) if isinstance(p, ZeroLock) else None
                ),
            ),
            ("commits", lambda p, r: commits(p, r, 1, args.seconds)),
            ("commits", lambda p, r: commits(p, r + "n", args.agents, args.seconds)),
            ("claims", lambda p, r: claims(p, r, args.claimants, args.tasks)),
            (
                "claims",
                lambda p, r: (
                    claims_next(p, r + "c", args.claimants, args.tasks)
                    if isinstance(p, ZeroLock) and has_claim
                    else None
                ),
            ),
            ("appends", lambda p, r: appends(p, r, args.appenders, args.append_items)),
        ]
        for number, (name, step) in enumerate(steps):
            if name not in args.workload:
                continue
            for peer in peers:
                if STOP.is_set():
                    raise KeyboardInterrupt
                # etcd's two paths share one member: each its own keys.
                grpc = "g" if peer.name == GRPC_PEER else ""
                row = step(peer, f"{stamp}-{number}{grpc}")
                if row is not None:
                    row["db"] = db
                    record(row)
    return rows


WEB_SERVERS = ("uvicorn", "daphne")
WORKLOADS = ("mixed", "get", "floor", "commits", "claims", "appends")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--db",
        type=comma_list(DBS),
        default=["sqlite"],
        help="ZeroLock's configuration(s): sqlite (embedded default) and/or postgres "
        f"(PostgreSQL database {PG_DB}, recreated, and Redis {REDIS_URL})",
    )
    parser.add_argument(
        "--workload", type=comma_list(WORKLOADS), default=list(WORKLOADS), help=",".join(WORKLOADS)
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per timed workload and peer")
    parser.add_argument("--agents", type=int, default=50, help="mixed, get, floor, commits")
    parser.add_argument("--counters", type=int, default=20, help="keys the mixed agents share")
    parser.add_argument("--claimants", type=int, default=80)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--appenders", type=int, default=200)
    parser.add_argument("--append-items", type=int, default=50, help="items per appender")
    parser.add_argument(
        "--client",
        choices=("httpx", "httpcore"),
        default="httpx",
        help="the agents' HTTP client, the same for both peers (see Client)",
    )
    parser.add_argument(
        "--transport",
        choices=("http", "ws"),
        default="http",
        help="how ZeroLock's agents send their requests: HTTP (with --client), or request "
        "frames over each agent's /ws/agents/ socket (etcd keeps --client)",
    )
    parser.add_argument(
        "--server",
        choices=WEB_SERVERS,
        default="uvicorn",
        help="ZeroLock's web server (bin/serve's ZEROLOCK_SERVER)",
    )
    parser.add_argument(
        "--idempotency-keys",
        action="store_true",
        help="ZeroLock's timed writes carry a fresh Idempotency-Key each, as the SDK's do",
    )
    parser.add_argument(
        "--etcd-grpc",
        action="store_true",
        help="also drive etcd over gRPC, its native client path (bench/etcd_grpc.py; needs "
        "grpcio and protobuf): a third peer in every workload, and a second table",
    )
    parser.add_argument("--keep-data", action="store_true", help="keep data dirs and server logs")
    args = parser.parse_args(argv)
    if args.etcd_grpc:
        try:
            import etcd_grpc  # noqa: F401
        except ImportError as missing:
            parser.error(
                f"--etcd-grpc needs grpcio and protobuf ({missing}): pip install -e '.[bench]'"
            )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # `kill` stops both servers as Ctrl-C does

    signal.signal(signal.SIGTERM, on_term)
    failed = False
    for db in args.db:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        load_before = os.getloadavg()
        log(f"configuration {db}: load average {load_before[0]:.2f} on {os.cpu_count()} CPUs")
        try:
            rows = run_config(db, args, stamp)
        except KeyboardInterrupt:
            STOP.set()
            log("interrupted: both servers stopped; nothing written")
            return 130
        load_after = os.getloadavg()
        lines = summary(rows, args)
        print(
            f"\n### {db} ({stamp}, {args.seconds:g} s per timed workload, client {args.client}, ZeroLock over {args.transport}{' with Idempotency-Keys' if args.idempotency_keys else ''}, server {args.server}, "
            f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after)\n"
        )
        print(summary_markdown(lines))
        print()
        grpc_lines = summary(rows, args, GRPC_PEER) if args.etcd_grpc else []
        if grpc_lines:
            print(summary_markdown(grpc_lines, GRPC_PEER))
            print()
        print(cpu_markdown(rows))
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        over = ("" if args.transport == "http" else f"-{args.transport}") + (
            "-keyed" if args.idempotency_keys else ""
        )
        path = RESULTS_DIR / f"peer-{db}-{args.server}{over}-{stamp}.json"
        document = {
            "config": db,
            "stamp": stamp,
            "cpus": os.cpu_count(),
            # 1, 5, 15-minute load averages: how shared the machine was.
            "load_average_before": load_before,
            "load_average_after": load_after,
            "args": {k: v for k, v in vars(args).items()},
            "rows": rows,
            "summary": [{k: v for k, v in ln.items() if k != "digits"} for ln in lines],
            "summary_grpc": [{k: v for k, v in ln.items() if k != "digits"} for ln in grpc_lines],
        }
        path.write_text(json.dumps(jsonable(document), indent=2) + "\n")
        log(f"wrote {path}")
        if plot(rows, db, path.with_suffix(".png")):
            log(f"wrote {path.with_suffix('.png')}")
        failed = failed or any(r["errors"] for r in rows)
        failed = failed or any(
            r.get(k) for r in rows for k in ("lost_updates", "duplicates", "items_lost")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
