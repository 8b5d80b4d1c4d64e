"""Additive operations cost what they add (hardening round three): a REST
append, shards created with large values and a long text delta, against a live
server whose RSS is watched from /proc while each request runs.

Before: a 30,000-item append (a 60 KB body) took the server to 11 GB (pycrdt's
``extend`` is quadratic in one transaction) and a test run was OOM-killed; a
30,000-step delta over a 900,000-character text took 11 s under the write
lock. The watchdog kills the server once it has grown by a gigabyte, so the
old code fails here without taking the machine with it."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from access.services import api_key_create
from tests.conftest import server_env, start_server, stop_server
from tests.site.rawhttp import rss_mb

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

ITEMS = 30_000
GROWN_BELOW_MB = 100
FEW_SECONDS = 3.0  # what the issue asks; these took 0.1-0.8 s here, 11-56 s before
KILL_AT_MB = 1024


@pytest.fixture
def server(transactional_db) -> Iterator[tuple[int, str]]:
    """A server of its own for each test: its RSS is that test's requests' alone,
    and a server the watchdog killed takes no other test with it."""
    proc, url = start_server(server_env())
    yield proc.pid, url
    stop_server(proc)


@pytest.fixture
def api(server) -> Iterator[httpx.Client]:
    _, key = api_key_create(name="cost", permissions=["shard:read", "shard:write", "shard:create"])
    with httpx.Client(
        base_url=server[1], headers={"X-API-Key": key, "X-Agent-Id": "bulk"}, timeout=120
    ) as client:
        yield client


def measured(
    pid: int, request: Callable[[], httpx.Response]
) -> tuple[httpx.Response, float, float]:
    """The answer, the seconds it took and how far the server's RSS rose meanwhile
    (sampled every 20 ms); past KILL_AT_MB the watchdog kills the server and the
    test fails there."""
    baseline = peak = rss_mb(pid)
    done = threading.Event()
    killed = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.wait(0.02):
            try:
                peak = max(peak, rss_mb(pid))
            except FileNotFoundError:
                return
            if peak - baseline > KILL_AT_MB:
                os.kill(pid, signal.SIGKILL)
                killed.set()
                return

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    try:
        response = request()
    except httpx.TransportError:
        if not killed.is_set():
            raise
    finally:
        elapsed = time.monotonic() - started
        done.set()
        watcher.join()
    assert not killed.is_set(), (
        f"killed after {elapsed:.1f} s: the server grew past {KILL_AT_MB} MB"
    )
    print(f"{elapsed:.2f} s, RSS {baseline:.0f} MB -> peak {peak:.0f} MB")
    return response, elapsed, peak - baseline


def warm_up(api: httpx.Client, crdt_type: str, body: dict) -> None:
    """One small write of each kind first: first-use allocations are not the op's."""
    shard_id = f"warm-{crdt_type}"
    api.post("/api/shards", json={"id": shard_id, "type": "additive", "crdt_type": crdt_type})
    assert api.post(f"/api/shards/{shard_id}/commit", json=body).status_code == 200


def assert_cheap(elapsed: float, grown: float) -> None:
    assert grown < GROWN_BELOW_MB, f"the server grew by {grown:.0f} MB"
    assert elapsed < FEW_SECONDS, f"took {elapsed:.1f} s"


def test_a_30000_item_append_is_answered_in_seconds_and_grows_the_server_by_under_100_mb(
    server, api
):
    warm_up(api, "array", {"append": [1, 2, 3]})
    api.post("/api/shards", json={"id": "bulk-log", "type": "additive", "crdt_type": "array"})
    items = [n % 10 for n in range(ITEMS)]

    response, elapsed, grown = measured(
        server[0], lambda: api.post("/api/shards/bulk-log/commit", json={"append": items})
    )
    assert response.status_code == 200, response.text
    assert_cheap(elapsed, grown)
    assert api.get("/api/shards/bulk-log").json()["value"] == items


def test_an_array_shard_created_with_30000_items_is_answered_in_seconds(server, api):
    warm_up(api, "array", {"append": [1]})
    items = [f"i{n}" for n in range(ITEMS)]
    body = {"id": "bulk-init", "type": "additive", "crdt_type": "array", "initial_value": items}

    response, elapsed, grown = measured(server[0], lambda: api.post("/api/shards", json=body))
    assert response.status_code == 201, response.text
    assert_cheap(elapsed, grown)
    assert api.get("/api/shards/bulk-init").json()["value"] == items


def test_a_30000_step_delta_over_a_long_text_is_answered_in_seconds(server, api):
    warm_up(api, "text", {"delta": [{"insert": "x"}]})
    text = "a" * 900_000
    body = {"id": "bulk-text", "type": "additive", "crdt_type": "text", "initial_value": text}
    assert api.post("/api/shards", json=body).status_code == 201
    delta: list[dict] = []
    for _ in range(ITEMS // 3):  # 10,000 edits: each character 41 replaced by two
        delta += [{"retain": 40}, {"delete": 1}, {"insert": "xy"}]
    expected = ("a" * 40 + "xy") * (ITEMS // 3) + text[41 * (ITEMS // 3) :]

    response, elapsed, grown = measured(
        server[0], lambda: api.post("/api/shards/bulk-text/commit", json={"delta": delta})
    )
    assert response.status_code == 200, response.text
    assert_cheap(elapsed, grown)
    assert response.json()["value"] == expected


@pytest.mark.parametrize(
    ("crdt_type", "write"),
    [
        ("map", lambda api: api.post(
            "/api/shards/bulk-map/commit",
            json={"new_value": {f"key-{n}": n for n in range(ITEMS)}},
        )),
        ("map", lambda api: api.post("/api/shards", json={
            "id": "bulk-map-init", "type": "additive", "crdt_type": "map",
            "initial_value": {f"key-{n}": n for n in range(ITEMS)},
        })),
        ("text", lambda api: api.post("/api/shards", json={
            "id": "bulk-text-init", "type": "additive", "crdt_type": "text",
            "initial_value": "é" * 400_000,
        })),
    ],
    ids=["map-patch", "map-initial-value", "text-initial-value"],
)  # fmt: skip
def test_a_map_patch_of_30000_keys_and_large_initial_values_are_answered_in_seconds(
    server, api, crdt_type, write
):
    """These were linear already (0.1-0.3 s in-process, measured): kept so."""
    warm_up(
        api,
        crdt_type,
        {"new_value": {"a": 1}} if crdt_type == "map" else {"delta": [{"insert": "x"}]},
    )
    api.post("/api/shards", json={"id": "bulk-map", "type": "additive", "crdt_type": "map"})

    response, elapsed, grown = measured(server[0], lambda: write(api))
    assert response.status_code in (200, 201), response.text
    assert_cheap(elapsed, grown)
