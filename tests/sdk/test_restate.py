"""The Restate adapter against a real ``restate-server`` (the npm package's
binary, tests/runtimes/restate/) and a live ZeroLock server: the handlers of
tests/sdk/restate_app.py, served by hypercorn in their own process and
registered through Restate's admin API, are invoked through Restate's ingress.
The approval wait is resolved by a real ZeroLock webhook delivery (a Celery
worker) through the bridge."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.sdk.extras import require

if os.environ.get("ZEROLOCK_SKIP_RUNTIMES") == "1":
    pytest.skip(
        "ZEROLOCK_SKIP_RUNTIMES=1: the Restate live tests run on CI's SQLite configuration",
        allow_module_level=True,
    )
require("restate", "restate")
require("hypercorn", "restate")

from access.services import api_key_create  # noqa: E402
from approvals.models import WebhookDelivery, WebhookSubscription, new_webhook_secret  # noqa: E402
from tests.approvals.test_webhooks import worker  # noqa: E402, F401 (a fixture)
from tests.conftest import ROOT, _free_port  # noqa: E402
from tests.sdk.runtime_docs import assert_snippets_are_the_example  # noqa: E402
from zerolock_sdk import CreateShardOptions, ZeroLockClient  # noqa: E402
from zerolock_sdk.idempotency import step_idempotency_key  # noqa: E402
from zerolock_sdk.restate import step_key  # noqa: E402

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

RESTATE_DIR = ROOT / "tests" / "runtimes" / "restate"
RESTATE_BIN = RESTATE_DIR / "node_modules" / ".bin" / "restate-server"
SECRET = new_webhook_secret()


def restate_binary() -> Path:
    """The pinned restate-server, installed with ``npm ci`` on first use. Without
    npm it is a skip here and a failure in CI (which must run these tests)."""
    if not RESTATE_BIN.exists():
        npm = shutil.which("npm")
        if npm is None:
            if os.environ.get("CI"):
                pytest.fail("restate-server is missing and npm is not installed")
            pytest.skip("npm is not installed: it installs restate-server (tests/runtimes/restate)")
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=RESTATE_DIR, check=True, timeout=300
        )
    return RESTATE_BIN


def wait_until(check, seconds: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} did not happen" + (f":\n{log.read_text()}" if log else "")
            )
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Restate:
    ingress: str
    admin: str
    dir: Path
    handlers_port: int
    handlers: subprocess.Popen
    handlers_env: dict[str, str]

    def start_handlers(self) -> None:
        """The handlers' process on its fixed port (a restart keeps the deployment's URI)."""
        log = self.dir / "handlers.log"
        with open(log, "ab") as out:
            self.handlers = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hypercorn",
                    "tests.sdk.restate_app:app",
                    "--bind",
                    f"127.0.0.1:{self.handlers_port}",
                    "--workers=0",  # in this process: kill -9 must kill the handlers
                ],
                cwd=ROOT,
                env=self.handlers_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        url = f"http://127.0.0.1:{self.handlers_port}/health"
        wait_until(lambda: httpx.get(url).status_code == 200, 30, "the handlers' start", log)

    def send(self, handler: str, body: Any, key: str, service: str = "payouts") -> str:
        """Starts an invocation (idempotency key ``key``) and returns its id."""
        response = httpx.post(
            f"{self.ingress}/{service}/{handler}/send",
            json=body,
            headers={"idempotency-key": key},
            timeout=10,
        )
        assert response.status_code in (200, 202), response.text
        return response.json()["invocationId"]

    def output(self, invocation_id: str, timeout: float = 60) -> dict:
        response = httpx.get(
            f"{self.ingress}/restate/invocation/{invocation_id}/attach", timeout=timeout
        )
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def restate(live_server_url, tmp_path_factory) -> Iterator[Restate]:
    """restate-server on free loopback ports with a temporary base dir, and the
    handlers registered with it as a deployment."""
    binary = restate_binary()
    tmp = tmp_path_factory.mktemp("restate")
    ports = {name: _free_port() for name in ("node", "admin", "ingress")}
    config = tmp / "restate.toml"
    config.write_text(
        f'cluster-name = "zerolock-test"\n'
        f'base-dir = "{tmp / "data"}"\n'
        f'bind-address = "127.0.0.1:{ports["node"]}"\n'
        f'advertised-address = "http://127.0.0.1:{ports["node"]}/"\n'
        'listen-mode = "tcp"\n'
        "default-num-partitions = 1\n"
        f'[admin]\nbind-address = "127.0.0.1:{ports["admin"]}"\n'
        f'[ingress]\nbind-address = "127.0.0.1:{ports["ingress"]}"\n'
    )
    log = tmp / "restate-server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [str(binary), "--config-file", str(config), "--no-logo"],
            cwd=tmp,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    admin = f"http://127.0.0.1:{ports['admin']}"
    ingress = f"http://127.0.0.1:{ports['ingress']}"
    env = {
        **os.environ,
        "ZEROLOCK_URL": live_server_url,
        "ZL_TEST_DIR": str(tmp),
        "ZEROLOCK_WEBHOOK_SECRET": SECRET,
        "RESTATE_INGRESS_URL": ingress,
    }
    env.pop("ZEROLOCK_API_KEY", None)
    rs = Restate(ingress, admin, tmp, _free_port(), None, env)  # type: ignore[arg-type]
    bridge = None
    try:
        wait_until(lambda: httpx.get(f"{admin}/health").status_code == 200, 60, "admin", log)
        wait_until(
            lambda: httpx.get(f"{ingress}/restate/health").status_code == 200, 60, "ingress", log
        )
        rs.start_handlers()
        registered = httpx.post(
            f"{admin}/deployments",
            json={"uri": f"http://127.0.0.1:{rs.handlers_port}"},
            timeout=30,
        )
        assert registered.status_code in (200, 201), registered.text
        bridge_port = _free_port()
        bridge_log = tmp / "bridge.log"
        with open(bridge_log, "wb") as out:
            bridge = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hypercorn",
                    "tests.sdk.restate_app:bridge",
                    "--bind",
                    f"127.0.0.1:{bridge_port}",
                    "--workers=0",
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        rs.bridge_url = f"http://127.0.0.1:{bridge_port}/zerolock"  # type: ignore[attr-defined]
        wait_until(
            lambda: httpx.get(rs.bridge_url).status_code == 405,  # type: ignore[attr-defined]
            30,
            "the bridge's start",
            bridge_log,
        )
        yield rs
    finally:
        for proc in (bridge, rs.handlers, server):
            if proc is not None:
                stop(proc)


@pytest.fixture
def admin_key(restate) -> str:
    """An admin key for the test, and a worker key the handlers read from their file."""
    worker_key = api_key_create(
        name="restate handlers",
        permissions=["shard:read", "shard:write", "approval:request"],
        agent_ids=["payouts"],
    )[1]
    (restate.dir / "api-key").write_text(worker_key)
    return api_key_create(name="restate admin", permissions=["admin"])[1]


async def make_shard(url: str, key: str, shard_id: str, value: dict) -> None:
    async with ZeroLockClient(url, agent_id="setup", api_key=key) as zl:
        await zl.create_shard(shard_id, CreateShardOptions(initial_value=value))


async def test_a_handler_reads_and_commits_through_journaled_steps(
    restate, admin_key, live_server_url
):
    await make_shard(live_server_url, admin_key, "ledger-a", {})
    invocation = restate.send("book", {"shard": "ledger-a", "id": "p1", "amount": 5}, "book-a-1")
    out = restate.output(invocation)
    assert out["version"] == 2
    async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin_key) as zl:
        shard = await zl.get_shard("ledger-a")
        history = await zl.history("ledger-a")
    assert shard.value == {"p1": 5}
    assert [(h["version"], h["agent_id"]) for h in history] == [(1, "setup"), (2, "payouts")]
    assert out["invocation"] == invocation


async def test_a_claim_step_claims_the_task_once_and_a_second_invocation_sees_the_holder(
    restate, admin_key, live_server_url
):
    await make_shard(
        live_server_url, admin_key, "queue-a", {"t1": {"status": "pending", "holder": None}}
    )
    first = restate.output(restate.send("claim", {"shard": "queue-a", "task": "t1"}, "claim-1"))
    second = restate.output(restate.send("claim", {"shard": "queue-a", "task": "t1"}, "claim-2"))
    assert first == {"task_id": "t1", "claimed": True, "holder": "payouts"}
    # Another invocation is another step: no replay, the task is simply taken.
    assert second["claimed"] is False


async def test_a_handler_killed_after_zerolock_applied_its_commit_commits_exactly_once(
    restate, admin_key, live_server_url
):
    await make_shard(live_server_url, admin_key, "ledger-b", {"opening": 100})
    crash, crashed = restate.dir / "crash-after-commit", restate.dir / "commit-applied-then-hung"
    crashed.unlink(missing_ok=True)
    crash.write_text("once")
    invocation = restate.send("book", {"shard": "ledger-b", "id": "p9", "amount": 40}, "book-b-1")
    wait_until(crashed.exists, 30, "the commit", restate.dir / "handlers.log")
    async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin_key) as zl:
        # ZeroLock applied the write; Restate has not journaled the step's result.
        assert (await zl.get_shard("ledger-b")).version == 2
        restate.handlers.send_signal(signal.SIGKILL)  # kill -9
        restate.handlers.wait()
        started = time.monotonic()
        restate.start_handlers()
        out = restate.output(invocation)
        recovered = time.monotonic() - started
        history = await zl.history("ledger-b")
        shard = await zl.get_shard("ledger-b")
    # Restate replayed the invocation: the journaled read, then the commit step
    # again with the same key; ZeroLock answered with the first commit's answer.
    assert out["version"] == 2
    assert shard.value == {"opening": 100, "p9": 40}
    commits = [h for h in history if h["agent_id"] == "payouts"]
    assert len(commits) == 1, history  # exactly once: nothing lost, nothing doubled
    assert [h["version"] for h in history] == [1, 2]
    print(f"restarted handler finished the invocation {recovered:.1f} s after the restart")


@pytest.fixture
def bridge_subscribed(restate, worker) -> None:  # noqa: F811 (the imported fixture)
    """ZeroLock's webhooks (sent by a real Celery worker) go to the bridge."""
    WebhookSubscription.objects.create(
        name="restate bridge",
        url=restate.bridge_url,
        events=["approval.decided", "approval.expired"],
        secret=SECRET,
    )


async def test_wait_for_approval_resumes_when_the_decided_webhook_reaches_the_bridge(
    restate, admin_key, live_server_url, bridge_subscribed
):
    await make_shard(live_server_url, admin_key, "treasury-r", {"balance": 1000})
    invocation = restate.send(
        "pay_with_approval", {"shard": "treasury-r", "id": "acme", "amount": 250}, "pay-1"
    )
    async with ZeroLockClient(live_server_url, agent_id="officer", api_key=admin_key) as zl:
        pending: list = []

        async def asked() -> bool:
            pending[:] = await zl.list_approvals(status="pending", shard_id="treasury-r")
            return bool(pending)

        deadline = time.monotonic() + 30
        while not await asked():
            assert time.monotonic() < deadline, (restate.dir / "handlers.log").read_text()
            time.sleep(0.1)
        assert len(pending) == 1
        # The handler is suspended on its awakeable: nothing polls.
        still = httpx.get(f"{restate.ingress}/restate/invocation/{invocation}/output", timeout=5)
        assert still.status_code != 200, still.text
        started = time.monotonic()
        await zl.approve(pending[0].id, "within budget")
        out = restate.output(invocation)
        resumed = time.monotonic() - started
        shard = await zl.get_shard("treasury-r")
    assert out["approval_id"] == pending[0].id
    assert out["decision"]["status"] == "committed"
    assert out["decision"]["decided_by"]
    assert shard.value == {"balance": 1000, "acme": 250} and shard.version == 2
    print(f"the handler resumed {resumed * 1000:.0f} ms after the approval")


def delivered(approval_id: str) -> bool:
    return WebhookDelivery.objects.filter(
        approval_id=approval_id, event="approval.decided", status="delivered"
    ).exists()


def test_a_wait_that_starts_after_the_decision_reached_restate_resumes_at_once(
    restate, admin_key, live_server_url, bridge_subscribed
):
    worker_key = (restate.dir / "api-key").read_text()

    async def decided_approval() -> str:
        await make_shard(live_server_url, admin_key, "treasury-s", {"balance": 5})
        async with ZeroLockClient(live_server_url, agent_id="payouts", api_key=worker_key) as zl:
            approval = await zl.request_approval("treasury-s", {"balance": 1}, 1, "Pay 4")
        async with ZeroLockClient(live_server_url, agent_id="officer", api_key=admin_key) as zl:
            await zl.reject(approval.id, "not this month")
        return approval.id

    approval_id = asyncio.run(decided_approval())
    wait_until(lambda: delivered(approval_id), 15, "the webhook delivery")
    # The decision is already in the ZeroLockApprovals object: two waits, both
    # resumed by the stored decision, nothing delivered again.
    first = restate.send("wait", approval_id, "late-1", service="approval_waits")
    second = restate.send("wait", approval_id, "late-2", service="approval_waits")
    for invocation in (first, second):
        out = restate.output(invocation, timeout=20)
        assert (out["approval_id"], out["status"], out["reason"]) == (
            approval_id,
            "rejected",
            "not this month",
        )


def test_the_bridge_refuses_a_webhook_that_zerolock_did_not_sign(restate):
    body = b'{"type":"approval.decided","data":{"approval_id":"apr_1"}}'
    now = str(int(time.time()))
    forged = httpx.post(
        restate.bridge_url,
        content=body,
        headers={"webhook-id": "msg_1", "webhook-timestamp": now, "webhook-signature": "v1,AAAA"},
    )
    unsigned = httpx.post(restate.bridge_url, content=body)
    assert (forged.status_code, unsigned.status_code) == (401, 401)


def test_step_keys_name_the_invocation_and_the_step_and_stay_within_the_servers_limit():
    class FakeRequest:
        id = "inv_1"

    class Ctx:
        def request(self) -> FakeRequest:
            return FakeRequest()

    ctx = Ctx()
    assert step_key(ctx, "read") == "restate:inv_1:1:read"  # type: ignore[arg-type]
    assert step_key(ctx, "read") == "restate:inv_1:2:read"  # type: ignore[arg-type]
    long = step_idempotency_key("restate", "x" * 300)
    assert len(long) <= 255 and long.startswith("restate:sha256:")


def test_the_restate_section_of_the_runtimes_page_shows_the_tested_example_as_printed():
    assert_snippets_are_the_example("Restate", "restate")
