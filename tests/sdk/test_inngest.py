"""The Inngest adapter against a live ZeroLock server, with NO Inngest server:
the Inngest dev server cannot be installed here (its npm package downloads a
binary), so the functions run in the Inngest SDK's own simulator
(``inngest.experimental.mocked``: the SDK's step executor, memoization and
retries, run in-process with the run id "test"). The webhook-to-event bridge is
tested for real against ZeroLock's webhook delivery (a Celery worker); the
events it sends go to a recorder standing in for Inngest's Event API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.sdk.extras import require

if os.environ.get("ZEROLOCK_SKIP_RUNTIMES") == "1":
    pytest.skip(
        "ZEROLOCK_SKIP_RUNTIMES=1: the runtime adapter tests run on CI's SQLite configuration",
        allow_module_level=True,
    )
require("inngest", "inngest")

import inngest  # noqa: E402
from inngest.experimental import mocked  # noqa: E402

from access.services import api_key_create  # noqa: E402
from approvals.models import WebhookDelivery, WebhookSubscription, new_webhook_secret  # noqa: E402
from tests.approvals.test_webhooks import worker  # noqa: E402, F401 (a fixture)
from tests.conftest import ROOT, _free_port  # noqa: E402
from tests.sdk.runtime_docs import assert_snippets_are_the_example  # noqa: E402
from zerolock_sdk import CreateShardOptions, ZeroLockClient  # noqa: E402
from zerolock_sdk.inngest import InngestZeroLock  # noqa: E402

EXAMPLE = ROOT / "examples" / "inngest"
os.environ.setdefault("INNGEST_DEV", "1")  # the example's client: never Inngest Cloud here
sys.path.insert(0, str(EXAMPLE))
import app as example  # noqa: E402

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

client = mocked.Inngest(app_id="zerolock-test", is_production=False)
SECRET = new_webhook_secret()


class DropAnswerOnce(httpx.AsyncBaseTransport):
    """The real HTTP transport; the first answer to each armed path ending is
    lost after ZeroLock applied the request (the step sees a dropped connection
    and fails)."""

    def __init__(self, *endings: str) -> None:
        self.armed = set(endings)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # A connection per request: the simulator runs each step on a new event loop.
        async with httpx.AsyncHTTPTransport() as real:
            response = await real.handle_async_request(request)
            content = await response.aread()
        ending = next((e for e in self.armed if request.url.path.endswith(e)), None)
        if ending is not None:
            self.armed.discard(ending)
            raise httpx.ReadError(f"connection lost after {ending} was applied")
        return httpx.Response(response.status_code, headers=response.headers, content=content)


@pytest.fixture
def keys(live_server_url) -> tuple[str, str]:
    worker_key = api_key_create(
        name="inngest functions",
        permissions=["shard:read", "shard:write", "approval:request"],
        agent_ids=["payouts"],
    )[1]
    admin_key = api_key_create(name="inngest admin", permissions=["admin"])[1]
    return worker_key, admin_key


def zl_call(url: str, key: str, work, agent: str = "setup") -> Any:
    """One ZeroLock call from the (sync) test, outside the simulator's loop."""
    import asyncio

    async def run() -> Any:
        async with ZeroLockClient(url, agent_id=agent, api_key=key) as zl:
            return await work(zl)

    return asyncio.run(run())


def test_without_an_inngest_server_a_function_reads_and_commits_in_memoized_steps(
    live_server_url, keys
):
    worker_key, admin_key = keys
    zl_call(
        live_server_url,
        admin_key,
        lambda zl: zl.create_shard("ledger-i", CreateShardOptions(initial_value={})),
    )
    example.zl = InngestZeroLock(live_server_url, agent_id="payouts", api_key=worker_key)
    event = inngest.Event(
        name="payout/created", data={"shard": "ledger-i", "id": "p1", "amount": 3}
    )
    result = mocked.trigger(example.book_payout, event, client)
    assert result.status is mocked.Status.COMPLETED, result.error
    assert result.output == {"version": 2}
    shard = zl_call(live_server_url, admin_key, lambda c: c.get_shard("ledger-i"))
    assert shard.value == {"p1": 3}


def test_without_an_inngest_server_a_commit_step_retried_after_its_answer_was_lost_commits_once(
    live_server_url, keys
):
    worker_key, admin_key = keys
    zl_call(
        live_server_url,
        admin_key,
        lambda zl: zl.create_shard("ledger-j", CreateShardOptions(initial_value={"opening": 9})),
    )
    transport = DropAnswerOnce("/commit")
    example.zl = InngestZeroLock(
        live_server_url, agent_id="payouts", api_key=worker_key, transport=transport
    )
    event = inngest.Event(
        name="payout/created", data={"shard": "ledger-j", "id": "p2", "amount": 4}
    )
    result = mocked.trigger(example.book_payout, event, client)
    assert not transport.armed  # the answer was lost once
    assert result.status is mocked.Status.COMPLETED, result.error
    assert result.output == {"version": 2}
    history = zl_call(live_server_url, admin_key, lambda c: c.history("ledger-j"))
    # The SDK's executor ran the step again with the same run and step id: the
    # server replayed the first commit's answer. One commit, none lost.
    assert [(h["version"], h["agent_id"]) for h in history] == [(1, "setup"), (2, "payouts")]


def test_without_an_inngest_server_claim_and_approval_steps_retried_after_lost_answers_apply_once(
    live_server_url, keys
):
    worker_key, admin_key = keys
    tasks = {"t1": {"status": "pending", "holder": None}}
    zl_call(
        live_server_url,
        admin_key,
        lambda zl: zl.create_shard("queue-i", CreateShardOptions(initial_value=tasks)),
    )
    # claim_task is one transaction (POST /api/txn).
    transport = DropAnswerOnce("/txn", "/approvals/request")
    zl = InngestZeroLock(
        live_server_url, agent_id="payouts", api_key=worker_key, transport=transport
    )

    @client.create_function(fn_id="claim-ask", trigger=inngest.TriggerEvent(event="y"), retries=3)
    async def claim_and_ask(ctx: inngest.Context) -> dict[str, Any]:
        claimed = await zl.claim_task(ctx, "claim", "queue-i", "t1")
        seen = await zl.read_shard(ctx, "read", "queue-i")
        done = {**seen["value"], "t1": {"status": "done", "holder": "payouts"}}
        approval = await zl.request_approval(
            ctx, "ask", "queue-i", done, seen["version"], "Close t1"
        )
        return {"claimed": claimed, "approval": approval["id"]}

    result = mocked.trigger(claim_and_ask, inngest.Event(name="y"), client)
    assert result.status is mocked.Status.COMPLETED, result.error
    assert not transport.armed  # the claim's and the request's answers were lost
    assert result.output["claimed"] == {"task_id": "t1", "claimed": True, "holder": "payouts"}
    approvals = zl_call(live_server_url, admin_key, lambda c: c.list_approvals(shard_id="queue-i"))
    assert [a.id for a in approvals] == [result.output["approval"]]  # asked once
    history = zl_call(live_server_url, admin_key, lambda c: c.history("queue-i"))
    assert [h["version"] for h in history] == [1, 2]  # claimed once


def test_without_an_inngest_server_a_stale_commit_fails_the_step_without_retries(
    live_server_url, keys
):
    worker_key, admin_key = keys
    zl_call(
        live_server_url,
        admin_key,
        lambda zl: zl.create_shard("ledger-k", CreateShardOptions(initial_value={})),
    )
    zl = InngestZeroLock(live_server_url, agent_id="payouts", api_key=worker_key)

    @client.create_function(fn_id="stale", trigger=inngest.TriggerEvent(event="x"), retries=3)
    async def stale(ctx: inngest.Context) -> dict[str, Any]:
        return await zl.commit_shard(ctx, "commit-stale", "ledger-k", {"a": 1}, 7)

    result = mocked.trigger(stale, inngest.Event(name="x"), client)
    assert result.status is mocked.Status.FAILED
    assert isinstance(result.error, inngest.NonRetriableError)
    assert "STALE_VERSION" in str(result.error)


class EventApiRecorder:
    """Stands in for Inngest's Event API (``POST /e/<event key>``): records the
    events and answers as Inngest does, ``{"ids": [...], "status": 200}``."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.arrived = threading.Event()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                sent = body if isinstance(body, list) else [body]
                recorder.events.extend({"path": self.path, **e} for e in sent)
                answer = json.dumps({"ids": [e.get("id", "") for e in sent], "status": 200})
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(answer.encode())
                recorder.arrived.set()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def bridge(worker, tmp_path) -> Iterator[EventApiRecorder]:  # noqa: F811 (the imported fixture)
    """The bridge (uvicorn, its own process) subscribed to ZeroLock's approval
    webhooks, which a real Celery worker delivers; its events go to the recorder."""
    recorder = EventApiRecorder()
    port = _free_port()
    env = {
        **os.environ,
        "ZEROLOCK_WEBHOOK_SECRET": SECRET,
        "INNGEST_DEV": "1",
        "INNGEST_EVENT_API_BASE_URL": recorder.url,
        "INNGEST_EVENT_KEY": "test-event-key",
    }
    log = tmp_path / "bridge.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "tests.sdk.inngest_app:bridge", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/zerolock"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url).status_code == 405:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    WebhookSubscription.objects.create(
        name="inngest bridge", url=url, events=["approval.decided"], secret=SECRET
    )
    try:
        yield recorder
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        recorder.close()


def test_a_real_webhook_delivery_becomes_the_event_that_ends_the_approval_wait_no_inngest_server(
    live_server_url, keys, bridge
):
    worker_key, admin_key = keys
    zl_call(
        live_server_url,
        admin_key,
        lambda zl: zl.create_shard("treasury-i", CreateShardOptions(initial_value={"b": 10})),
    )

    async def ask(zl: ZeroLockClient) -> Any:
        return await zl.request_approval("treasury-i", {"b": 7}, 1, "Pay 3")

    approval = zl_call(live_server_url, worker_key, ask, agent="payouts")
    pending = zl_call(live_server_url, admin_key, lambda zl: zl.get_approval(approval.id)).raw
    zl_call(live_server_url, admin_key, lambda zl: zl.approve(approval.id, "ok"))
    assert bridge.arrived.wait(10), "no event reached the Event API stand-in"
    [sent] = bridge.events
    delivery = WebhookDelivery.objects.get(approval_id=approval.id, event="approval.decided")
    assert sent["path"] == "/e/test-event-key"
    assert sent["name"] == "zerolock/approval.decided"
    assert sent["id"] == delivery.id  # Inngest drops a re-sent event with the same id
    assert sent["data"]["approval_id"] == approval.id
    assert sent["data"]["status"] == "committed"

    example.zl = InngestZeroLock(live_server_url, agent_id="payouts", api_key=worker_key)
    trigger = inngest.Event(
        name="payout/large", data={"shard": "treasury-i", "id": "acme", "amount": 3}
    )
    # The simulator cannot pause a run at its wait and resume it later, so the run
    # is given what Inngest would have memoized by then: the approval its "ask"
    # step got (the one requested above), the check that read it still pending,
    # and the event the bridge sent as the one that fulfilled the wait.
    waited = mocked.trigger(
        example.pay_approved,
        trigger,
        client,
        step_stubs={"ask": approval.raw, "wait-approval-check": pending, "wait-approval": sent},
    )
    assert waited.status is mocked.Status.COMPLETED, waited.error
    assert waited.output["status"] == "committed"
    assert waited.output["approval_id"] == approval.id
    assert waited.output == sent["data"]  # the event's data, not a read of the API
    # A run that reaches the wait after the decision does not wait: its check
    # step (run for real against ZeroLock) already sees the decision.
    late = mocked.trigger(example.pay_approved, trigger, client, step_stubs={"ask": approval.raw})
    assert late.status is mocked.Status.COMPLETED, late.error
    assert late.output["status"] == "committed"
    assert late.output["id"] == approval.id and late.output != sent["data"]  # the API's shape


def test_the_example_script_books_a_payout_in_the_sdk_simulator_no_inngest_server(
    live_server_url,
):
    key = api_key_create(name="inngest example", permissions=["admin"])[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ZEROLOCK_", "INNGEST_"))}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "app.py")],
        env={**base, "ZEROLOCK_URL": live_server_url, "ZEROLOCK_API_KEY": key, "INNGEST_DEV": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=EXAMPLE,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": Completed, {'version': 2}" in done.stdout


def test_the_inngest_section_of_the_runtimes_page_shows_the_tested_example_as_printed():
    assert_snippets_are_the_example("Inngest", "inngest")
