"""The seed's names for every SDK call, argument and field, against a live server,
next to ours (which keep working); and credentials from the environment."""

from __future__ import annotations

import asyncio

import pytest

from access.services import api_key_create
from zerolock_sdk import (
    CachedZeroLockClient,
    CreateShardOptions,
    MissingApiKeyError,
    StaleCommitError,
    SyncZeroLockClient,
    ZeroLockClient,
)
from zerolock_sdk import models as models_module
from zerolock_sdk import types as seed_types
from zerolock_sdk.approvals import ApprovalClient
from zerolock_sdk.locks import FileLock, FileLocker
from zerolock_sdk.task_claim import claim_task, complete_task, get_pending_tasks

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
EVERYTHING = ["shard:read", "shard:write", "shard:create", "approval:request"]


def a_key(*permissions: str) -> str:
    return api_key_create(name="seed api", permissions=list(permissions or EVERYTHING))[1]


async def eventually(check, tries: int = 150) -> None:
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


def test_the_types_module_holds_the_option_and_result_types():
    for name in (
        "CreateShardOptions",
        "CommitOptions",
        "Shard",
        "CommitResult",
        "Approval",
        "ApprovalStatus",
        "Task",
        "ClaimResult",
        "TxnResult",
        "Lease",
    ):
        assert getattr(seed_types, name) is getattr(models_module, name)
    assert seed_types.CreateShardOptions is CreateShardOptions


def test_commit_shard_takes_the_value_then_the_version_and_commits_options(live_server_url):
    key = a_key()

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="planner", api_key=key) as zl:
            await zl.create_shard("plan", CreateShardOptions(initial_value={"step": 1}))
            await zl.create_shard("basis", CreateShardOptions(initial_value="v1"))
            result = await zl.commit_shard("plan", {"step": 2}, 1)
            assert (result.version, result.value) == (2, {"step": 2})
            with pytest.raises(StaleCommitError) as stale:
                await zl.commit_shard("plan", {"step": 3}, 1)
            assert stale.value.current_version == 2
            # **options are commit's keywords: an idempotency key replays, a read_set checks.
            first = await zl.commit_shard("plan", {"step": 3}, 2, idempotency_key="once-3")
            again = await zl.commit_shard("plan", {"step": 3}, 2, idempotency_key="once-3")
            assert first.version == again.version == 3
            applied = await zl.commit_shard("plan", {"step": 4}, 3, read_set={"basis": 1})
            assert applied.version == 4
            # Our own name and order still work.
            assert (await zl.commit("plan", 4, {"step": 5})).version == 5
            assert [h["version"] for h in await zl.history("plan")] == [1, 2, 3, 4, 5]
        with SyncZeroLockClient(live_server_url, agent_id="script", api_key=key) as sync:
            assert sync.commit_shard("plan", {"step": 6}, 5).version == 6

    asyncio.run(scenario())


def test_pending_tasks_are_objects_with_an_id_that_still_compare_as_ids(live_server_url):
    key = a_key()

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="w1", api_key=key) as zl:
            tasks = {
                "b": {"status": "pending", "payload": 2},
                "a": {"status": "pending", "payload": 1},
                "c": {"status": "done"},
            }
            await zl.create_shard("q", CreateShardOptions(initial_value=tasks))
            pending = await get_pending_tasks(zl, "q")
            assert [task.id for task in pending] == ["a", "b"]
            assert pending[0].data == {"status": "pending", "payload": 1}
            assert pending == ["a", "b"]  # the old list-of-ids shape still holds
            result = await claim_task(zl, "q", pending[0].id, "w1")
            assert result.claimed and result.task_id == "a"
            # The seed's complete_task(client, shard, task_id, agent_id).
            assert await complete_task(zl, "q", pending[0].id, "w1")
            assert not await complete_task(zl, "q", "b", "w1")  # not held
            assert (await zl.get_shard("q")).value["a"] == {
                "status": "done",
                "payload": 1,
                "holder": "w1",
            }

    asyncio.run(scenario())


def test_wait_for_approval_takes_the_seeds_arguments_and_reports_approved_once_applied(
    live_server_url,
):
    executor_key, officer_key = a_key(), a_key("approval:decide", "shard:read")

    async def scenario() -> None:
        async with (
            ApprovalClient(live_server_url, agent_id="executor", api_key=executor_key) as ex,
            ApprovalClient(live_server_url, agent_id="officer", api_key=officer_key) as officer,
        ):
            await ex.client.create_shard(
                "vault", CreateShardOptions(initial_value={"n": 0}, reversible=False)
            )
            yes = await ex.request_approval("vault", {"n": 1}, 1, "one", ttl_seconds=60)
            no = await ex.request_approval("vault", {"n": 2}, 1, "two", ttl_seconds=60)
            late = await ex.request_approval("vault", {"n": 3}, 1, "three", ttl_seconds=60)
            assert yes.status == "pending" and yes.rejection_reason is None

            async def decide() -> None:
                await asyncio.sleep(0.3)
                await officer.approve(yes.id, reason="fine")
                await officer.reject(no.id, reason="Risk too high")

            deciding = asyncio.create_task(decide())
            approved = await ex.wait_for_approval(
                yes.id, poll_interval_seconds=0.2, timeout_seconds=20
            )
            rejected = await ex.wait_for_approval(no.id, poll_interval_seconds=0.2)
            await deciding
            assert approved.status == "approved" and approved.applied
            assert approved.server_status == "committed" and approved.commit["version"] == 2
            assert approved.rejection_reason is None
            assert (rejected.status, rejected.rejection_reason) == ("rejected", "Risk too high")
            assert rejected.reason == "Risk too high" and not rejected.applied
            # Approved by the officer but not applied (the shard moved on): never
            # reported as "approved".
            stale = await officer.approve(late.id, reason="too late")
            assert stale.status != "approved" and not stale.applied
            assert stale.commit["error"] == "STALE_VERSION"
            assert (await ex.client.get_shard("vault")).value == {"n": 1}
            # Our older keyword still works; both at once is a mistake.
            again = await ex.wait_for_approval(yes.id, poll_seconds=0.1, timeout_seconds=5)
            assert again.status == "approved"
            with pytest.raises(TypeError):
                await ex.wait_for_approval(yes.id, poll_seconds=1, poll_interval_seconds=1)

    asyncio.run(scenario())


def test_a_status_the_sdk_does_not_know_is_reported_as_the_server_said_it():
    raw = {"id": "apr_x", "shard_id": "s", "status": "applied_elsewhere", "commit": None}
    approval = models_module.Approval.from_json(raw)
    assert approval.status == approval.server_status == "applied_elsewhere"
    assert not approval.applied and approval.is_decided


def test_the_cached_client_takes_the_seeds_options_and_five_argument_conflict_hook(
    live_server_url,
):
    key = a_key()

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="other", api_key=key) as other:
            await other.create_shard("cfg", CreateShardOptions(initial_value={"mode": "a"}))
            conflicts: list[tuple] = []

            async def on_conflict(shard_id, version, winning, rejected, diff) -> None:
                conflicts.append((shard_id, version, winning, rejected, diff))

            zl = CachedZeroLockClient(
                live_server_url,
                agent_id="cached",
                api_key=key,
                ws_url=live_server_url.replace("http", "ws") + "/ws/agents/",
                auto_connect_ws=False,
                ttl_ms=60_000,
            )
            async with zl:
                assert zl.ttl == 60 and zl._socket is None  # not connected until asked
                zl.set_on_conflict(on_conflict)
                await zl.connect_ws()
                assert (await zl.get_shard("cfg")).version == 1
                await other.commit_shard("cfg", {"mode": "b"}, 1)
                await eventually(lambda: not zl.is_fresh("cfg"))
                assert (await zl.get_shard("cfg")).value == {"mode": "b"}
                with pytest.raises(StaleCommitError):
                    await zl.commit_shard("cfg", {"mode": "c"}, 1)
                await eventually(lambda: bool(conflicts))
            shard_id, version, winning, rejected, diff = conflicts[0]
            assert (shard_id, version, winning, rejected) == (
                "cfg",
                2,
                {"mode": "b"},
                {"mode": "c"},
            )
            assert diff == [{"op": "replace", "path": "/mode", "value": "c"}]

    asyncio.run(scenario())


def test_clients_take_the_key_and_url_from_the_environment(live_server_url, monkeypatch):
    key = a_key()
    monkeypatch.setenv("ZEROLOCK_API_KEY", key)
    monkeypatch.setenv("ZEROLOCK_URL", live_server_url)

    async def scenario() -> None:
        async with ZeroLockClient(agent_id="env") as zl:
            assert zl.base_url == live_server_url and zl.api_key == key
            await zl.create_shard("from-env", CreateShardOptions(initial_value=1))
        async with ApprovalClient(agent_id="env") as approvals:
            assert (await approvals.client.get_shard("from-env")).value == 1
        # A key passed explicitly wins over the environment.
        async with ZeroLockClient(agent_id="env", api_key="zl_00000000.wrong") as wrong:
            assert wrong.api_key == "zl_00000000.wrong"

    asyncio.run(scenario())


def test_without_any_key_the_error_says_how_to_set_one(live_server_url, monkeypatch):
    monkeypatch.delenv("ZEROLOCK_API_KEY", raising=False)

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="nokey") as zl:
            assert (await zl.health())["status"] in ("ok", "degraded")  # needs no key
            with pytest.raises(MissingApiKeyError) as missing:
                await zl.get_shard("anything")
        message = str(missing.value)
        assert "ZEROLOCK_API_KEY" in message and "export" in message and "api_key=" in message
        assert missing.value.code == "NO_API_KEY"
        async with CachedZeroLockClient(live_server_url, auto_connect_ws=False) as cached:
            with pytest.raises(MissingApiKeyError):
                await cached.connect_ws()

    asyncio.run(scenario())


def test_the_sdk_file_lock_answers_true_and_file_locker_takes_the_seeds_arguments(
    live_server_url, monkeypatch
):
    monkeypatch.setenv("ZEROLOCK_API_KEY", a_key())

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="other") as other:
            await other.create_shard("locks", CreateShardOptions(initial_value={}))
            lock = FileLock(other, "locks", "other")
            assert await lock.acquire("held.py", timeout_seconds=1) is True
            async with FileLocker(live_server_url, "agent-1", "locks", "config.py") as locker:
                held = (await other.get_shard("locks")).value
                assert held["config.py"]["holder"] == "agent-1"
                assert locker.lock.client.agent_id == "agent-1"
            assert "config.py" not in (await other.get_shard("locks")).value
            with pytest.raises(TimeoutError):
                async with FileLocker(live_server_url, "agent-2", "locks", "held.py", timeout=0.3):
                    raise AssertionError("got a lock someone else holds")
            assert (await other.get_shard("locks")).value.keys() == {"held.py"}

    asyncio.run(scenario())
