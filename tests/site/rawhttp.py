"""Raw-socket helpers for tests that send what no HTTP client would."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import httpx


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def send_until_refused(url: str, head: bytes, pieces: Iterable[bytes]) -> tuple[bytes, int]:
    """Sends ``head``, then ``pieces`` until they run out or the server stops
    reading; returns what it answered and how many bytes of ``pieces`` went out."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(head)
    sent = 0
    try:
        for piece in pieces:
            sock.sendall(piece)
            sent += len(piece)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass
    answer = b""
    try:
        while data := sock.recv(65536):
            answer += data
    except (ConnectionResetError, TimeoutError):
        pass
    sock.close()
    return answer, sent


def flood_outcome(url: str, pid: int, head: bytes, pieces: Iterable[bytes]) -> dict:
    """Sends a flood (``send_until_refused``) to the server process ``pid``:
    returns its status, error code, the bytes it let in, how much it grew (MB),
    and whether it still answers health afterwards."""
    before = rss_mb(pid)
    answer, sent = send_until_refused(url, head, pieces)
    time.sleep(0.5)
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    return {
        "status": int(status_line.split()[1]) if status_line else None,
        "code": json.loads(body)["error"]["code"] if body else None,
        "sent": sent,
        "grown_mb": rss_mb(pid) - before,
        "healthy": httpx.get(f"{url}/api/health", timeout=5).status_code == 200,
    }


def assert_refused_unharmed(
    outcome: dict, status: int, code: str, *, sent_below: int, grown_below_mb: float
) -> None:
    """The flood got ``status`` and ``code``, the server stopped reading it
    before ``sent_below`` bytes, grew less than ``grown_below_mb`` and still
    answers health."""
    assert (outcome["status"], outcome["code"]) == (status, code), outcome
    assert outcome["sent"] < sent_below, outcome
    assert outcome["grown_mb"] < grown_below_mb, outcome
    assert outcome["healthy"], outcome


def descriptors(pid: int) -> tuple[int, int]:
    """How many descriptors the process ``pid`` holds open now, and how many of
    them are sockets (the rest, database files mostly, grow as its threads first
    touch the database)."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return len(targets), sum(target.startswith("socket:") for target in targets)


def answer_of(raw: bytes) -> tuple[int | None, dict[str, str], dict | None]:
    """The status, headers (lower-cased names) and JSON body of a raw answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head:
        return None, {}, None
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in lines)
    }
    return int(status_line.split()[1]), headers, json.loads(body) if body else None


def read_to_close(sock: socket.socket) -> bytes:
    """Everything the server sends on ``sock`` until it closes it."""
    answer = b""
    try:
        while data := sock.recv(65536):
            answer += data
    except ConnectionResetError:
        pass
    return answer


def get_health_on(sock: socket.socket) -> bytes:
    """Sends GET /api/health on an open connection and reads one answer whole;
    returns its head (or what came before the server closed)."""
    sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        data = sock.recv(65536)
        if not data:
            return answer
        answer += data
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(answer_of(head + b"\r\n\r\n")[1]["content-length"])
    while len(body) < length:
        body += sock.recv(65536)
    return head


class HealthPoller:
    """Polls GET /api/health every 0.1 s over one kept-alive connection, in a
    thread, while a test holds the server busy; records each answer's time."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.latencies and not self.failures and time.monotonic() < deadline:
            time.sleep(0.05)  # its connection is open before the test goes on
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    status = client.get("/api/health").status_code
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                else:
                    self.latencies.append(time.monotonic() - started)
                    if status != 200:
                        self.failures.append(f"status {status}")
                self._stop.wait(0.1)
