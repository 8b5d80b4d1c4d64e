"""Raw-socket helpers for tests that send what no HTTP client would."""

from __future__ import annotations

import json
import socket
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
