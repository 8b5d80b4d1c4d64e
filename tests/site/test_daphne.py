"""Daphne, served through its own entry point (zerolock_site/daphne_server.py,
ZEROLOCK_SERVER=daphne): health, a commit and a socket on a real Daphne
process, its body limit where the body arrives, its patches still reaching the
code they were written for, and Daphne's own command refused."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from tests.conftest import ROOT, _free_port, server_env, start_server, stop_server
from tests.site.rawhttp import answer_of, assert_refused_unharmed, flood_outcome, send_until_refused

MiB = 1024 * 1024


def declared_past_the_limit() -> bytes:
    """A request head declaring a 2 MiB body, none of which is ever sent."""
    return (
        b"POST /api/shards HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % (2 * MiB)
    )


@pytest.fixture(scope="module")
def daphne(django_db_setup, django_db_blocker) -> Iterator[tuple[subprocess.Popen, str]]:
    proc, url = start_server({**server_env(), "ZEROLOCK_SERVER": "daphne"})
    yield proc, url
    stop_server(proc)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_daphne_serves_health_a_commit_and_an_invalidation_on_a_socket(daphne, make_key):
    proc, url = daphne
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
    assert b"zerolock_site.daphne_server" in cmdline
    health = httpx.get(f"{url}/api/health", timeout=10)
    assert health.status_code == 200, health.text
    assert health.headers["server"] == "daphne"  # uvicorn's process sends none
    assert health.json()["checks"]["database"] == "ok"

    key = make_key("shard:read", "shard:write", "shard:create")
    headers = {"X-API-Key": key, "X-Agent-Id": "on-daphne"}
    created = httpx.post(
        f"{url}/api/shards",
        json={"id": "daphne-plan", "type": "decision", "initial_value": 1},
        headers=headers,
        timeout=10,
    )
    assert created.status_code == 201, created.text

    async def subscribe_then_commit() -> tuple[httpx.Response, dict]:
        async with websockets.connect(
            url.replace("http", "ws") + "/ws/agents/",
            additional_headers={"X-API-Key": key, "X-Agent-Id": "watcher"},
        ) as socket:
            await socket.send(json.dumps({"type": "subscribe", "shard_ids": ["daphne-plan"]}))
            subscribed = json.loads(await asyncio.wait_for(socket.recv(), timeout=10))
            assert subscribed == {"type": "subscribed", "shard_ids": ["daphne-plan"]}
            async with httpx.AsyncClient(headers=headers, timeout=10) as client:
                committed = await client.post(
                    f"{url}/api/shards/daphne-plan/commit",
                    json={"expected_version": 1, "new_value": 2},
                )
            pushed = json.loads(await asyncio.wait_for(socket.recv(), timeout=10))
        return committed, pushed

    committed, pushed = asyncio.run(subscribe_then_commit())
    assert committed.status_code == 200, committed.text
    assert committed.json()["version"] == 2
    assert pushed == {
        "type": "invalidate",
        "shard_id": "daphne-plan",
        "version": 2,
        "committed_by": "on-daphne",
    }


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_daphne_refuses_a_300_mb_chunked_body_at_the_limit_and_never_holds_it(daphne):
    """Without the patch Twisted spooled all 300 MB (and Daphne queued it in
    memory) before the application could refuse it."""
    proc, url = daphne
    chunk = b"x" * 65536
    frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    outcome = flood_outcome(
        url,
        proc.pid,
        b"POST /api/shards HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n",
        (frame for _ in range(300 * 16)),
    )
    assert_refused_unharmed(
        outcome, 413, "PAYLOAD_TOO_LARGE", sent_below=64 * MiB, grown_below_mb=30
    )


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_daphne_refuses_a_body_declared_past_the_limit_before_any_of_it_is_sent(daphne):
    _, url = daphne
    raw, _ = send_until_refused(url, declared_past_the_limit(), [])
    status, _, body = answer_of(raw)
    assert (status, body and body["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE"), raw[:300]


PATCHES_REACH_THEIR_CODE = """
import inspect, json
import django
django.setup()
from zerolock_site.daphne_patches import install_patches
install_patches()
from autobahn.websocket import protocol
from daphne.http_protocol import WebRequest
from twisted.web import http
print(json.dumps({
    "autobahn formats its per-socket debug lines with pformat":
        "pformat(configAttrLog)" in inspect.getsource(protocol.WebSocketProtocol._connectionMade),
    "autobahn's pformat is repr": protocol.pformat is repr,
    "twisted parses a POST's content type with _parseContentType":
        "_parseContentType(ctype)" in inspect.getsource(http.Request.requestReceived),
    "twisted's _parseContentType sees no form":
        http._parseContentType(b"multipart/form-data; boundary=x") == b"",
    "daphne's request counts the body in gotLength and handleContentChunk":
        all(getattr(WebRequest, name).__module__ == "zerolock_site.daphne_patches"
            for name in ("gotLength", "handleContentChunk", "process")),
}))
"""


def test_the_daphne_patches_still_reach_the_code_they_were_written_for():
    """If Twisted or autobahn stops reading a name a patch replaces, this fails
    and that patch should go (or follow the code it was written for)."""
    done = subprocess.run(
        [sys.executable, "-c", PATCHES_REACH_THEIR_CODE],
        cwd=ROOT,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert [fact for fact, holds in facts.items() if not holds] == []


def test_daphnes_own_command_refuses_to_serve_the_application_without_its_patches():
    """``daphne zerolock_site.asgi:application`` would serve without the body limit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-p", str(_free_port()), "zerolock_site.asgi:application"],
        cwd=ROOT,
        env=server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"Daphne's own command served the application:\n{output[-2000:]}")
    assert proc.returncode != 0
    assert "python -m zerolock_site.daphne_server" in output
