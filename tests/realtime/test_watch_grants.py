"""A watch stream lives only as long as its key's grants: GET /api/watch (SSE)
ends within about a second of a revocation, a lost ``shard:read`` or a scope
that no longer covers its prefix, like the sockets do. Live server, real sockets."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.db import connection

from access.identity import Actor
from access.models import ApiKey
from access.services import api_key_create, api_key_revoke, api_key_update
from shards.selectors import shard_get
from shards.services import shard_commit, shard_create

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# The key watcher polls every 0.5 s; the stream is told at its next turn.
ENDS_WITHIN_SECONDS = 2.5


class Writer(threading.Thread):
    """Commits to ``ledger.main`` every 0.1 s until stopped: the stream always has news."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.halt = threading.Event()
        self.commits = 0

    def run(self) -> None:
        try:
            self._run()
        finally:
            connection.close()  # back to the pool: a thread's connection outlives it

    def _run(self) -> None:
        while not self.halt.is_set():
            shard = shard_get("ledger.main", payload=False)
            shard_commit(
                actor=Actor("bookkeeper"),
                shard=shard,
                expected_version=shard.version,
                new_value={"n": self.commits},
            )
            self.commits += 1
            time.sleep(0.1)


@contextlib.contextmanager
def stream_of(base: str, raw: str) -> Iterator[httpx.Response]:
    with (
        httpx.Client(headers={"X-API-Key": raw}, timeout=10) as client,
        client.stream("GET", f"{base}/api/watch", params={"prefix": "ledger."}) as response,
    ):
        yield response


def watch_until_it_ends(
    base: str, raw: str, change: Callable[[], None]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None, float]:
    """Reads the stream: two changes, then ``change()`` the key, then on until the
    stream ends. Returns the changes before, the changes after, the last
    ``error`` event, and the seconds from the key change to the end."""
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    error = None
    changed_at = 0.0
    event = data = None
    with stream_of(base, raw) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
            elif line == "" and data is not None:
                if event == "error":
                    error = data
                elif changed_at:
                    after.append(data)
                else:
                    before.append(data)
                    if len(before) == 2:
                        change()
                        changed_at = time.monotonic()
                event = data = None
            if changed_at and time.monotonic() - changed_at > 10:
                break  # still streaming: the test fails below
    took = time.monotonic() - changed_at
    print(f"stream ended {took:.2f} s after the key change, {len(after)} changes after it")
    return before, after, error, took


@pytest.fixture
def writer(live_server_url):
    shard_create(actor=Actor("bookkeeper"), shard_id="ledger.main", shard_type="decision")
    running = Writer()
    running.start()
    yield running
    running.halt.set()
    running.join()


def auditor_key(**grants: Any) -> tuple[ApiKey, str]:
    return api_key_create(
        name="auditor", permissions=grants.pop("permissions", ["shard:read"]), **grants
    )


def test_a_stream_ends_within_about_a_second_of_its_key_being_revoked(live_server_url, writer):
    key, raw = auditor_key()
    before, after, error, took = watch_until_it_ends(
        live_server_url, raw, lambda: api_key_revoke(key=key, revoked_by="admin")
    )
    assert len(before) == 2
    assert error is not None and error["error"]["code"] == "KEY_REVOKED"
    assert took < ENDS_WITHIN_SECONDS, f"the stream went on {took:.1f} s, {len(after)} changes"


def test_a_stream_ends_when_its_key_loses_shard_read(live_server_url, writer):
    key, raw = auditor_key(permissions=["shard:read", "shard:write"])
    before, after, error, took = watch_until_it_ends(
        live_server_url,
        raw,
        lambda: api_key_update(key=key, changed_by="admin", permissions=["shard:write"]),
    )
    assert error is not None and error["error"]["code"] == "PERMISSION_DENIED"
    assert error["error"]["permission"] == "shard:read"
    assert took < ENDS_WITHIN_SECONDS, f"the stream went on {took:.1f} s, {len(after)} changes"


def test_a_stream_ends_when_its_keys_scope_no_longer_covers_the_prefix(live_server_url, writer):
    key, raw = auditor_key(shard_prefixes=["ledger."])
    before, after, error, took = watch_until_it_ends(
        live_server_url,
        raw,
        lambda: api_key_update(key=key, changed_by="admin", shard_prefixes=["ledger.side"]),
    )
    assert error is not None and error["error"]["code"] == "PERMISSION_DENIED"
    assert error["error"]["shard_ids"] == ["ledger."]
    assert took < ENDS_WITHIN_SECONDS, f"the stream went on {took:.1f} s, {len(after)} changes"


def test_a_stream_goes_on_when_its_key_changes_in_ways_that_still_cover_it(live_server_url, writer):
    key, raw = auditor_key()
    seen: list[dict[str, Any]] = []
    with (
        httpx.Client(headers={"X-API-Key": raw}, timeout=10) as client,
        client.stream("GET", f"{live_server_url}/api/watch", params={"prefix": "ledger."}) as r,
    ):
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
                if len(seen) == 1:
                    # Narrower, but still over the prefix; and a new permission.
                    api_key_update(
                        key=key,
                        changed_by="admin",
                        shard_prefixes=["ledger"],
                        permissions=["shard:read", "approval:request"],
                    )
                    changed_at = time.monotonic()
                if len(seen) > 1 and time.monotonic() - changed_at > ENDS_WITHIN_SECONDS:
                    break
            assert not line.startswith("event: error")
    assert len(seen) >= 10  # ~0.1 s apart, for longer than an ending would take
