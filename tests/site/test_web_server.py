"""The web server `make run` serves (uvicorn, zerolock_site/uvicorn_server.py),
over real sockets, and its one-write transport on its own."""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import time

import httpx
import pytest

from tests.conftest import server_env, start_server, stop_server
from tests.site.rawhttp import (
    answer_of,
    assert_refused_unharmed,
    flood_outcome,
    get_health_on,
    send_until_refused,
)
from zerolock_site import uvicorn_server
from zerolock_site.uvicorn_server import _HeadWithBody


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_kept_alive_connection_idle_past_a_clients_pool_expiry_still_answers(live_server_url):
    """httpx drops an idle pooled connection after 5 s, uvicorn closed one after
    5 s too: a client that reused it just then lost a POST it could not resend
    (ReadError), about once in six runs of 80 appenders. The server must not be
    the first to close."""
    host, port = live_server_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        assert get_health_on(sock).startswith(b"HTTP/1.1 200")
        time.sleep(6.5)  # past httpx's keepalive_expiry and uvicorn's default
        assert get_health_on(sock).startswith(b"HTTP/1.1 200")


class _Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"extra:{name}"


def _head_with_body(coroutine_body):
    async def run() -> _Recorder:
        recorder = _Recorder()
        await coroutine_body(_HeadWithBody(recorder))  # type: ignore[arg-type]
        return recorder

    return asyncio.run(run())


HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


def test_an_answers_head_and_body_leave_in_one_write():
    async def answer(transport):
        transport.write(HEAD)
        transport.write(b"{}")

    assert _head_with_body(answer).writes == [HEAD + b"{}"]


def test_a_head_with_nothing_behind_it_leaves_on_the_loops_next_turn():
    seen: list[list[bytes]] = []

    async def stream(transport):
        transport.write(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
        seen.append(list(transport._transport.writes))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        seen.append(list(transport._transport.writes))
        transport.write(b"frame")

    recorder = _head_with_body(stream)
    assert seen == [[], [b"HTTP/1.1 101 Switching Protocols\r\n\r\n"]]
    assert recorder.writes[-1] == b"frame"


def test_close_sends_a_held_head_first_and_other_calls_reach_the_transport():
    async def closing(transport):
        transport.write(HEAD)
        assert transport.get_extra_info("peername") == "extra:peername"
        transport.close()

    recorder = _head_with_body(closing)
    assert recorder.writes == [HEAD]
    assert recorder.closed


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_forwarded_for_header_does_not_change_whose_rate_limit_a_request_counts_against():
    """uvicorn trusts X-Forwarded-For from 127.0.0.1 by default; ZeroLock trusts
    no proxy header, so each guess below counts against the one real address."""
    env = server_env()
    env["ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE"] = "3"
    proc, url = start_server(env)
    try:
        statuses = [
            httpx.get(f"{url}/api/shards", headers={"X-Forwarded-For": f"10.0.0.{n}"}).status_code
            for n in range(5)
        ]
    finally:
        stop_server(proc)
    # At most three pass, all counted against 127.0.0.1. Fewer may: the start-up
    # health probe, and on Redis other tests' requests this minute, count there too.
    assert statuses[3:] == [429, 429], statuses


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_headers_that_never_end_are_refused_past_64_kb_and_never_held():
    """httptools keeps whatever precedes the blank line: 50 MB of headers grew
    the process by 47 MB before this bound (Daphne's Twisted stopped at 16 KB)."""
    proc, url = start_server(server_env())
    try:
        outcome = flood_outcome(
            url,
            proc.pid,
            b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            (b"X-Pad-%d: " % n + b"a" * 262144 + b"\r\n" for n in range(200)),  # ~50 MB
        )
        assert_refused_unharmed(
            outcome, 431, "HEADERS_TOO_LARGE", sent_below=16 * 1024 * 1024, grown_below_mb=20
        )
    finally:
        stop_server(proc)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "headers",
    [
        b"X-Pad: " + b"a" * 87_000 + b"\r\n",
        b"".join(b"X-Pad-%d: " % n + b"a" * 860 + b"\r\n" for n in range(100)),
    ],
    ids=["one long header", "a hundred short ones"],
)
def test_a_whole_head_past_64_kb_in_one_write_is_refused_too(live_server_url, headers):
    """The limit counted only from a head's second read: 87 KB in one write got 200."""
    head = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n"
    answer, _ = send_until_refused(live_server_url, head, [])
    status, response_headers, body = answer_of(answer)
    assert (status, response_headers.get("connection")) == (431, "close"), answer[:200]
    assert body is not None
    assert body["error"]["code"] == "HEADERS_TOO_LARGE"


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_head_just_under_64_kb_in_one_write_is_served(live_server_url):
    head = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 64_000
    answer, _ = send_until_refused(live_server_url, head + b"\r\nConnection: close\r\n\r\n", [])
    assert answer_of(answer)[0] == 200


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_ordinary_requests_with_a_large_body_are_not_mistaken_for_a_long_head(live_server_url):
    # Head and a 900 KB body arrive together in large reads: only the head counts.
    answer = httpx.post(
        f"{live_server_url}/api/shards",
        content=b'{"id": "' + b"x" * 900_000 + b'"}',
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 401  # refused for the missing key, not the head


def test_the_server_freezes_what_it_loaded_before_it_serves(monkeypatch):
    """Full collections must not walk the ~130,000 objects loaded at start
    (a 120-230 ms pause of the whole process each, measured): main() freezes
    them after loading the application and before serving."""
    frozen_at_start: list[int] = []
    monkeypatch.setattr(
        uvicorn_server.ZeroLockServer,
        "run",
        lambda self, sockets=None: frozen_at_start.append(gc.get_freeze_count()),
    )
    monkeypatch.setattr(sys, "argv", ["uvicorn_server", "--port", "0"])
    try:
        uvicorn_server.main()
    finally:
        gc.unfreeze()  # this test process's objects go back to the collector
    assert len(frozen_at_start) == 1
    # Django, the apps and the ASGI application are among what was frozen.
    assert frozen_at_start[0] > 50_000
