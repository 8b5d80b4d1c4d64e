"""Connections the web server lets go (issue "Hardening, round three", H3): a head
has a deadline, and a process and each client address hold a bounded number of
connections. Live uvicorn processes over real sockets, with short deadlines and
low caps so each test takes seconds; descriptors counted in /proc/<pid>/fd."""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import websockets.sync.client

from tests.conftest import server_env, start_server, stop_server
from tests.site.rawhttp import (
    HealthPoller,
    answer_of,
    descriptors,
    get_health_on,
    read_to_close,
)
from zerolock_site import settings as site_settings

HEAD_TIMEOUT = 2.0
# The deadline fires in the server's loop; a slow shared machine may run it late.
SLACK = 3.0
DB = pytest.mark.django_db(transaction=True)
HALF_HEADS = [
    b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: ",
    # A WebSocket upgrade's head is an HTTP head: the same deadline.
    b"GET /ws/agents/ HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nX-Drip: ",
]


@contextmanager
def _server(**settings: str) -> Iterator[tuple[int, str]]:
    env = server_env()
    env.update(settings)
    proc, url = start_server(env)
    try:
        yield proc.pid, url
    finally:
        stop_server(proc)


def _connect(url: str, source: str = "127.0.0.1") -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))


def _held(url: str, count: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """``count`` connections that each got one answer and are kept alive."""
    held = [_connect(url, source) for _ in range(count)]
    for sock in held:
        assert get_health_on(sock).startswith(b"HTTP/1.1 200")
    return held


def _refusal(url: str, source: str = "127.0.0.1") -> tuple[int | None, dict, dict | None]:
    """What a new connection is answered without sending anything, read until
    the server closes it."""
    with _connect(url, source) as sock:
        return answer_of(read_to_close(sock))


def _let_in_again(url: str, count: int) -> list[socket.socket]:
    """``count`` new connections answered 200, tried until the server has seen
    the closes that freed their slots (a connection's end reaches it a moment
    after the client closed)."""
    admitted: list[socket.socket] = []
    deadline = time.monotonic() + 10
    while len(admitted) < count and time.monotonic() < deadline:
        sock = _connect(url)
        if get_health_on(sock).startswith(b"HTTP/1.1 200"):
            admitted.append(sock)
        else:
            sock.close()
            time.sleep(0.1)
    return admitted


def _closed_by_server(
    opened: dict[socket.socket, float], dripping: set[socket.socket], pid: int, within: float
) -> tuple[dict[socket.socket, tuple[float | None, bytes]], tuple[int, int]]:
    """Waits up to ``within`` s for the server to close each socket of
    ``opened`` (each with the time it was opened), sending one byte every 0.5 s
    on those in ``dripping`` meanwhile. Returns, per socket, how long after its
    opening the server closed it (None: it did not) and what it sent first;
    and the most descriptors (all, sockets) the server held meanwhile."""
    selector = selectors.DefaultSelector()
    received = dict.fromkeys(opened, b"")
    closed: dict[socket.socket, float] = {}
    for sock in opened:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    most = (0, 0)
    deadline = time.monotonic() + within
    next_drip = time.monotonic()
    while len(closed) < len(opened) and time.monotonic() < deadline:
        now = time.monotonic()
        if now >= next_drip:
            if pid:
                most = max(most, descriptors(pid), key=lambda counted: counted[1])
            for sock in dripping - closed.keys():
                with contextlib.suppress(OSError):  # closed by the server: read below
                    sock.send(b"a")
            next_drip = now + 0.5
        for key, _ in selector.select(timeout=max(0.0, next_drip - time.monotonic())):
            sock = key.fileobj  # type: ignore[assignment]
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                data = b""
            if data:
                received[sock] += data
            else:
                closed[sock] = time.monotonic() - opened[sock]
                selector.unregister(sock)
    selector.close()
    return {sock: (closed.get(sock), received[sock]) for sock in opened}, most


@pytest.fixture(scope="module")
def short_deadline(django_db_setup, django_db_blocker) -> Iterator[tuple[int, str]]:
    with _server(ZEROLOCK_HEAD_TIMEOUT_SECONDS=str(HEAD_TIMEOUT)) as server:
        yield server


@pytest.mark.live
@DB
def test_silent_and_half_sent_connections_are_closed_at_the_deadline_while_health_answers(
    short_deadline,
):
    """The probe's 20,000 idle or half-sent connections held every descriptor
    and health did not answer until they closed. The half-sent ones send a byte
    every 0.5 s throughout: the deadline counts from the connection's start."""
    pid, url = short_deadline
    before = descriptors(pid)
    with HealthPoller(url) as health:
        opened: dict[socket.socket, float] = {}
        for _ in range(200):
            opened[_connect(url)] = time.monotonic()
        dripping: set[socket.socket] = set()
        for n in range(200):
            sock = _connect(url)
            opened[sock] = time.monotonic()
            sock.sendall(HALF_HEADS[n % 2])
            dripping.add(sock)
        outcomes, most = _closed_by_server(opened, dripping, pid, HEAD_TIMEOUT + SLACK + 2)
        time.sleep(0.3)
        polled_through = len(health.latencies)
    for sock in opened:
        sock.close()
    time.sleep(0.5)
    after = descriptors(pid)
    print(
        f"server descriptors (all, sockets): before {before}, most while held {most}, after {after}"
    )
    print(f"health: {len(health.latencies)} polls, slowest {max(health.latencies):.3f} s")

    times = [closed_after for closed_after, _ in outcomes.values()]
    assert None not in times, f"{times.count(None)} of 400 still open"
    assert min(times) > HEAD_TIMEOUT - 0.5 and max(times) < HEAD_TIMEOUT + SLACK, times
    assert {received for sock, (_, received) in outcomes.items() if sock not in dripping} == {b""}
    for sock in dripping:
        status, headers, body = answer_of(outcomes[sock][1])
        assert (status, headers.get("connection")) == (408, "close")
        assert body is not None
        assert body["error"]["code"] == "REQUEST_TIMEOUT"
        assert body["error"]["timeout_seconds"] == HEAD_TIMEOUT

    assert not health.failures, health.failures
    assert polled_through > HEAD_TIMEOUT / 0.2 and max(health.latencies) < 1.0
    assert most[1] >= before[1] + 400  # they were all held at once
    assert after[1] <= before[1] + 2  # and all given back


@pytest.mark.live
@DB
def test_a_kept_alive_connection_idles_past_the_deadline_but_its_next_head_has_one(
    short_deadline,
):
    """Idle time between requests is the keep-alive's (ZEROLOCK_KEEP_ALIVE_SECONDS);
    the head deadline counts again from the next request's first byte."""
    _, url = short_deadline
    with _connect(url) as sock:
        assert get_health_on(sock).startswith(b"HTTP/1.1 200")
        time.sleep(HEAD_TIMEOUT + 1)
        assert get_health_on(sock).startswith(b"HTTP/1.1 200")
        time.sleep(HEAD_TIMEOUT / 2)
        started = time.monotonic()
        sock.sendall(HALF_HEADS[0])
        outcomes, _ = _closed_by_server({sock: started}, {sock}, 0, HEAD_TIMEOUT + SLACK + 2)
    closed_after, received = outcomes[sock]
    assert closed_after is not None
    assert HEAD_TIMEOUT - 0.5 < closed_after < HEAD_TIMEOUT + SLACK
    status, _, body = answer_of(received)
    assert body is not None
    assert (status, body["error"]["code"]) == (408, "REQUEST_TIMEOUT")


def _assert_server_busy(refusal: tuple[int | None, dict, dict | None], limit: int) -> None:
    status, headers, body = refusal
    assert status == 503, refusal
    assert (headers["retry-after"], headers["connection"]) == ("1", "close")
    assert body is not None
    assert (body["error"]["code"], body["error"]["limit"]) == ("SERVER_BUSY", limit)


@pytest.mark.live
@DB
def test_past_the_process_cap_new_connections_get_503_and_the_held_ones_go_on():
    with _server(ZEROLOCK_MAX_CONNECTIONS="50") as (pid, url):
        before = descriptors(pid)
        with HealthPoller(url) as health:  # its connection holds one of the 50
            held = _held(url, 49)
            refusals = [_refusal(url) for _ in range(100)]
            during = descriptors(pid)
            assert all(get_health_on(sock).startswith(b"HTTP/1.1 200") for sock in held)
            for sock in held[:10]:
                sock.close()
            admitted = _let_in_again(url, 10)
            refused_again = _refusal(url)
        for sock in held[10:] + admitted:
            sock.close()
        time.sleep(0.5)
        after = descriptors(pid)
    print(
        f"server descriptors (all, sockets): before {before}, 50 held + 100 refused {during}, after {after}"
    )

    for refusal in refusals:
        _assert_server_busy(refusal, 50)
    assert "This server process" in refusals[0][2]["error"]["message"]  # type: ignore[index]
    assert len(admitted) == 10
    _assert_server_busy(refused_again, 50)  # the ten freed slots are taken again
    assert not health.failures, health.failures
    assert health.latencies and max(health.latencies) < 1.0
    assert during[1] <= before[1] + 50 + 5  # the refused ones were closed at once
    assert after[1] <= before[1] + 2


@pytest.fixture(scope="module")
def five_per_address(django_db_setup, django_db_blocker) -> Iterator[tuple[int, str]]:
    with _server(ZEROLOCK_MAX_CONNECTIONS_PER_ADDRESS="5") as server:
        yield server


@pytest.mark.live
@DB
def test_past_the_per_address_cap_that_address_gets_503_and_others_are_let_in(
    five_per_address,
):
    pid, url = five_per_address
    before = descriptors(pid)
    with HealthPoller(url) as health:  # from 127.0.0.1, like the four below
        held = _held(url, 4)
        refusals = [_refusal(url) for _ in range(20)]
        others = _held(url, 5, source="127.0.0.2")  # another address: its own five
        refused_other = _refusal(url, source="127.0.0.2")
        assert all(get_health_on(sock).startswith(b"HTTP/1.1 200") for sock in held)
        during = descriptors(pid)
        held[0].close()
        admitted = _let_in_again(url, 1)
    for sock in held[1:] + others + admitted:
        sock.close()
    time.sleep(0.5)
    after = descriptors(pid)
    print(
        f"server descriptors (all, sockets): before {before}, 10 held + 21 refused {during}, after {after}"
    )

    for refusal in [*refusals, refused_other]:
        _assert_server_busy(refusal, 5)
    assert "This address" in refusals[0][2]["error"]["message"]  # type: ignore[index]
    assert len(admitted) == 1
    assert not health.failures, health.failures
    assert max(health.latencies) < 1.0
    assert during[1] <= before[1] + 10 + 5
    assert after[1] <= before[1] + 2


@pytest.mark.live
@DB
def test_websockets_hold_their_connections_slot_until_they_close(five_per_address, make_key):
    """After the upgrade the WebSocket protocol owns the socket: its connection
    counts until the socket is gone, then frees its slot."""
    _, url = five_per_address
    key = make_key("shard:read")
    ws_url = url.replace("http://", "ws://") + "/ws/agents/"
    with contextlib.ExitStack() as stack:
        sockets = [
            stack.enter_context(
                websockets.sync.client.connect(ws_url, additional_headers={"X-API-Key": key})
            )
            for _ in range(5)
        ]
        for ws in sockets:
            ws.send('{"type": "ping"}')
            assert '"pong"' in str(ws.recv(timeout=10))
        refusal = _refusal(url)
    admitted = _let_in_again(url, 5)
    for sock in admitted:
        sock.close()

    _assert_server_busy(refusal, 5)
    assert len(admitted) == 5


@pytest.mark.live
@DB
def test_the_server_raises_its_soft_descriptor_limit_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))  # the child inherits it
    try:
        proc, _ = start_server(server_env())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
    finally:
        stop_server(proc)
    line = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    assert line.split()[3:5] == [str(hard), str(hard)], line


def test_the_default_connection_cap_stays_well_below_the_descriptor_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    seen = {}
    try:
        for limit in (1024, 4096, 20000):
            if limit <= hard:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
                seen[limit] = site_settings._default_max_connections()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    expected = {1024: 512, 4096: 3584, 20000: 4096}
    assert seen == {limit: cap for limit, cap in expected.items() if limit <= hard}
