"""Watchers that stop reading hold one small batch each, not a window of whole
entries, and the memory comes back when they go. Measured on a live server
process: RSS before, while 40 stalled watchers are open, and after they close."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from access.identity import Actor
from access.services import api_key_create
from audit.models import AuditEntry
from shards.selectors import shard_get
from shards.services import shard_commit, shard_create
from tests.conftest import server_env, start_server, stop_server
from tests.site.rawhttp import rss_mb

pytestmark = [pytest.mark.live, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

WATCHERS = 40
CHANGES = 60
VALUE_BYTES = 400_000  # 60 x 400 KB: 24 MB of history behind each watcher


@pytest.fixture
def history() -> Iterator[tuple[str, int]]:
    """A key, and the revision before 24 MB of big changes under ``big.``."""
    _, raw = api_key_create(name="reader", permissions=["shard:read"])
    since = AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0
    shard_create(actor=Actor("w"), shard_id="big.doc", shard_type="decision")
    for n in range(CHANGES):
        shard = shard_get("big.doc", payload=False)
        shard_commit(
            actor=Actor("w"),
            shard=shard,
            expected_version=shard.version,
            new_value={"n": n, "blob": chr(97 + n % 26) * VALUE_BYTES},
        )
    yield raw, since


def stalled(port: int) -> socket.socket:
    """A connection with a tiny receive buffer that is never read."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    return sock


def sse_watcher(port: int, raw: str, since: int) -> socket.socket:
    sock = stalled(port)
    sock.sendall(
        f"GET /api/watch?prefix=big.&since={since} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"X-API-Key: {raw}\r\n\r\n".encode()
    )
    return sock


def ws_watcher(port: int, raw: str, since: int) -> socket.socket:
    """/ws/agents/ by hand: the handshake, then one masked text frame (watch)."""
    sock = stalled(port)
    sock.sendall(
        "GET /ws/agents/ HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\nX-API-Key: {raw}\r\n\r\n".encode()
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    payload = json.dumps({"type": "watch", "prefix": "big.", "since": since}).encode()
    assert len(payload) < 126
    mask = b"\x01\x02\x03\x04"
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
    return sock


def settled_rss(pid: int, seconds: float) -> float:
    """RSS once it stops moving (or after ``seconds``)."""
    deadline = time.monotonic() + seconds
    last = rss_mb(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_mb(pid)
        if abs(now - last) < 1:
            return now
        last = now
    return last


@pytest.mark.parametrize("open_watcher", [sse_watcher, ws_watcher], ids=["sse", "socket"])
def test_forty_watchers_that_stop_reading_hold_little_and_give_it_back(history, open_watcher):
    raw, since = history
    proc, base = start_server(server_env())
    port = int(base.rsplit(":", 1)[1])
    try:
        # Warm the process (a first watch, its imports and caches) before measuring.
        open_watcher(port, raw, since).close()
        before = settled_rss(proc.pid, 5)
        watchers = [open_watcher(port, raw, since) for _ in range(WATCHERS)]
        during = settled_rss(proc.pid, 10)
        for watcher in watchers:
            watcher.close()
        after = settled_rss(proc.pid, 10)
    finally:
        stop_server(proc)
    print(f"RSS before {before:.0f} MB, stalled {during:.0f} MB, after {after:.0f} MB")
    # Each stalled watcher holds one value batch (256 KB) and the frame being
    # sent (400 KB): 40 of them about 30 MB. A window of 500 whole entries was
    # all 24 MB of history each: some 1 GB.
    assert during - before < 150, (before, during)
    assert after - before < 60, (before, during, after)
