from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from django.conf import settings
from rest_framework.test import APIClient

from access.services import api_key_create
from zerolock_site.supervisor import web_command

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def make_key(db) -> Callable[..., str]:
    """Creates an API key and returns the raw key string."""

    def make(
        *permissions: str, agents: list[str] | None = None, name: str = "test key", **kw
    ) -> str:
        _, raw = api_key_create(
            name=name, permissions=list(permissions) or ["admin"], agent_ids=agents, **kw
        )
        return raw

    return make


@pytest.fixture
def client_for() -> Callable[..., APIClient]:
    """An API client acting as an agent with a given key."""

    def make(key: str | None, agent: str | None = "agent-1") -> APIClient:
        client = APIClient()
        headers = {}
        if key is not None:
            headers["HTTP_X_API_KEY"] = key
        if agent is not None:
            headers["HTTP_X_AGENT_ID"] = agent
        client.credentials(**headers)
        return client

    return make


@pytest.fixture
def planner(make_key, client_for) -> APIClient:
    """An agent allowed to create, read and commit shards."""
    return client_for(make_key("shard:read", "shard:write", "shard:create"), agent="planner-1")


@pytest.fixture
def admin(make_key, client_for) -> APIClient:
    return client_for(make_key("admin"), agent="admin-1")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """Starts the web server bin/serve would (uvicorn unless ZEROLOCK_SERVER says
    otherwise) on a free port with this environment; returns it and its URL."""
    port = _free_port()
    log_path = Path(settings.DATA_DIR) / f"live-server-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            web_command(env, "127.0.0.1", str(port)),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{url}/api/health", timeout=2)
            return proc, url
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"live server did not start:\n{log_path.read_text()}") from None
            time.sleep(0.2)


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def server_env() -> dict[str, str]:
    """The environment that points a server process at the test database."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "ZEROLOCK_DB_PATH"}}
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        env["ZEROLOCK_DB_PATH"] = str(db["NAME"])
    else:
        url = urlsplit(os.environ["DATABASE_URL"])
        env["DATABASE_URL"] = urlunsplit(url._replace(path="/" + db["NAME"]))
    env["SECRET_KEY"] = settings.SECRET_KEY
    # The test run's data directory (its broker, first-run.txt), never make run's.
    env["ZEROLOCK_DATA_DIR"] = str(settings.DATA_DIR)
    # Swarm tests send thousands of requests from one address with one key.
    env["ZEROLOCK_RATE_LIMIT_PER_MINUTE"] = env["ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE"] = "100000000"
    env["ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE"] = "100000000"
    return env


@pytest.fixture(scope="session")
def live_server_url(django_db_setup, django_db_blocker) -> Iterator[str]:
    """A real web server process (bin/serve's: uvicorn unless ZEROLOCK_SERVER says
    otherwise) on a free port, serving the test database."""
    proc, url = start_server(server_env())
    yield url
    stop_server(proc)


@pytest.fixture(scope="session", autouse=True)
def _db_pool_closed_before_teardown(django_db_setup, django_db_blocker) -> Iterator[None]:
    """psycopg's pool keeps spare connections open; close them before the test
    database is dropped, or PostgreSQL refuses to drop it."""
    yield
    from django.db import connections

    for conn in connections.all():
        if hasattr(conn, "close_pool"):
            conn.close_pool()


def _flush_yielding_to_live_servers(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """Wraps a transactional test's teardown flush so it gives way to the live
    servers. Their write-behind threads (metrics, deliveries, webhooks) may still
    be writing when a test ends; on PostgreSQL the flush's TRUNCATE takes its table
    locks one by one, and a writer holding one of them while wanting another is a
    deadlock that PostgreSQL settles by killing either side: the flush (the test
    then leaks rows into the next) or the server's statement (a 500 in some later
    request). With a short lock timeout the flush is always the side that gives
    up, well before PostgreSQL's one-second deadlock check, and it simply retries."""

    def teardown(self: Any) -> None:
        from django.core.management.base import CommandError
        from django.db import OperationalError, connection

        if connection.vendor != "postgresql":
            original(self)
            return
        for attempt in range(50):
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = '200ms'")
            try:
                original(self)
                return
            except CommandError as exc:
                if not isinstance(exc.__cause__, OperationalError) or attempt == 49:
                    raise
                time.sleep(0.05)
            finally:
                with connection.cursor() as cursor:
                    cursor.execute("RESET lock_timeout")

    return teardown


@pytest.fixture(scope="session", autouse=True)
def _teardown_flush_gives_way_to_live_servers() -> Iterator[None]:
    from django.test import TransactionTestCase

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            TransactionTestCase,
            "_fixture_teardown",
            _flush_yielding_to_live_servers(TransactionTestCase._fixture_teardown),
        )
        yield


@pytest.fixture(autouse=True)
def _deliveries_written_inline(settings) -> None:
    """In-process tests read the delivery log right after a request; the live
    server keeps the default write-behind recorder."""
    settings.ZEROLOCK_DELIVERY_WRITE_BEHIND = False
    settings.ZEROLOCK_METRICS_WRITE_BEHIND = False
    settings.ZEROLOCK_REJECTION_WRITE_BEHIND = False
    # The whole suite comes from one address; rate-limit tests set their own limits.
    settings.ZEROLOCK_RATE_LIMIT_PER_MINUTE = settings.ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE = 10**8
    settings.ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE = 10**8


@pytest.fixture(autouse=True)
def _a_fresh_channel_layer_for_each_test() -> Iterator[None]:
    """Each async test runs on an event loop of its own, but the channel layer and
    the per-process fan-out listener are process-wide. channels_redis keeps one
    receive lock per layer instance: a lock held by a task of an earlier test's
    (closed) loop can leave a later test's receive waiting forever. A server
    process has one loop for its life, so only tests need this."""
    yield
    from channels.layers import channel_layers

    from realtime.fanout import fanout

    channel_layers.backends.clear()
    fanout.reset()
