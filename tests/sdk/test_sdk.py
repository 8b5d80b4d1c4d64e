"""The Python SDK against a live server: typed results, one exception per code,
the cached client, task claiming, file locks and approvals."""

from __future__ import annotations

import asyncio

import pytest

from access.services import api_key_create
from zerolock_sdk import (
    AuthenticationError,
    CachedZeroLockClient,
    CreateShardOptions,
    IrreversibleShardError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    SchemaViolationError,
    StaleCommitError,
    SyncZeroLockClient,
    ZeroLockClient,
)
from zerolock_sdk.approvals import ApprovalClient
from zerolock_sdk.locks import FileLock, FileLocker, LockTimeout
from zerolock_sdk.task_claim import (
    _claim_by_rereading,
    claim_next,
    claim_task,
    complete_task,
    fail_task,
    get_pending_tasks,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
EVERYTHING = ["shard:read", "shard:write", "shard:create", "approval:request"]


def a_key(*permissions: str, **options) -> str:
    return api_key_create(name="sdk", permissions=list(permissions or EVERYTHING), **options)[1]


def test_shards_commits_and_typed_errors(live_server_url):
    key, reader_key = a_key(), a_key("shard:read")

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="planner", api_key=key) as zl:
            shard = await zl.create_shard("plan", CreateShardOptions(initial_value={"step": 1}))
            assert (shard.version, shard.value) == (1, {"step": 1})
            result = await zl.commit("plan", 1, {"step": 2})
            assert result.version == 2 and result.audit_entry_id > 0
            with pytest.raises(StaleCommitError) as stale:
                await zl.commit("plan", 1, {"step": 3})
            assert (stale.value.current_version, stale.value.current_value) == (2, {"step": 2})
            await zl.create_shard("vault", CreateShardOptions(initial_value=0, reversible=False))
            with pytest.raises(IrreversibleShardError):
                await zl.commit("vault", 1, 1)
            await zl.create_shard(
                "typed", CreateShardOptions(initial_value=1, value_schema={"type": "integer"})
            )
            with pytest.raises(SchemaViolationError):
                await zl.commit("typed", 1, "one")
            with pytest.raises(NotFoundError):
                await zl.get_shard("nowhere")
            await zl.create_shard("log", CreateShardOptions(type="additive", crdt_type="array"))
            assert (await zl.append("log", [1, {"two": 2}])).value == [1, {"two": 2}]
            await zl.create_shard(
                "doc", CreateShardOptions(type="additive", crdt_type="text", initial_value="hi")
            )
            assert (await zl.text_delta("doc", [{"retain": 2}, {"insert": "!"}])).value == "hi!"
            assert [s.id for s in await zl.list_shards(prefix="p")] == ["plan"]
            assert [h["version"] for h in await zl.history("plan")] == [1, 2]
        async with ZeroLockClient(live_server_url, api_key="zl_nope.nope") as stranger:
            with pytest.raises(AuthenticationError):
                await stranger.get_shard("plan")
        async with ZeroLockClient(live_server_url, agent_id="r", api_key=reader_key) as reader:
            with pytest.raises(PermissionDeniedError):
                await reader.commit("plan", 2, {})

    asyncio.run(scenario())


def test_429_is_retried_a_bounded_number_of_times_then_raised(live_server_url):
    # Every request that carries a valid key counts against it, health probes too.
    key = a_key("shard:read", rate_limit=4)

    async def scenario() -> tuple[int, float]:
        async with ZeroLockClient(
            live_server_url, api_key=key, max_rate_limit_retries=1, max_retry_wait=0.05
        ) as zl:
            for _ in range(2):
                await zl.health()
                await zl.list_shards()
            with pytest.raises(RateLimitedError) as limited:
                await zl.list_shards()
            return zl.requests_sent, limited.value.retry_after

    sent, retry_after = asyncio.run(scenario())
    assert sent == 2 + 2 + 2  # two health probes, two lists, and one retried list
    assert retry_after > 0


def test_the_sync_twin_does_the_same_calls(live_server_url):
    with SyncZeroLockClient(live_server_url, agent_id="script", api_key=a_key()) as zl:
        zl.create_shard("counter", CreateShardOptions(initial_value=0))
        assert zl.commit("counter", 1, 1).version == 2
        with pytest.raises(StaleCommitError):
            zl.commit("counter", 1, 5)
        assert zl.get_shard("counter").value == 1


def test_the_cached_client_reads_from_memory_until_invalidated_and_hears_conflicts(live_server_url):
    key = a_key()

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="other", api_key=key) as other:
            await other.create_shard("cfg", CreateShardOptions(initial_value={"mode": "a"}))
            conflicts = []
            async with CachedZeroLockClient(live_server_url, agent_id="cached", api_key=key) as zl:
                zl.set_on_conflict(conflicts.append)
                assert (await zl.get_shard("cfg")).value == {"mode": "a"}
                assert (await zl.get_shard("cfg")).value == {"mode": "a"}
                assert zl.cache_hits == 1
                await other.commit("cfg", 1, {"mode": "b"})
                for _ in range(100):
                    if not zl.is_fresh("cfg"):
                        break
                    await asyncio.sleep(0.02)
                assert (await zl.get_shard("cfg")).value == {"mode": "b"}
                with pytest.raises(StaleCommitError):
                    await zl.commit("cfg", 1, {"mode": "c"})
                for _ in range(100):
                    if conflicts:
                        break
                    await asyncio.sleep(0.02)
                assert conflicts[0]["winning_value"] == {"mode": "b"}
                assert conflicts[0]["rejected_value"] == {"mode": "c"}
        async with CachedZeroLockClient(
            live_server_url, api_key=key, auto_connect_ws=False, ttl=30
        ) as offline:
            await offline.get_shard("cfg")
            await offline.get_shard("cfg")
            assert offline.cache_hits == 1

    asyncio.run(scenario())


def test_task_claiming_wins_once_and_reports_the_holder(live_server_url):
    key = a_key()

    async def scenario() -> None:
        tasks = {f"t{n}": {"status": "pending"} for n in range(4)}
        async with (
            ZeroLockClient(live_server_url, agent_id="alice", api_key=key) as alice,
            ZeroLockClient(live_server_url, agent_id="bob", api_key=key) as bob,
        ):
            await alice.create_shard("queue", CreateShardOptions(initial_value=tasks))
            assert await get_pending_tasks(alice, "queue") == ["t0", "t1", "t2", "t3"]
            won = await claim_task(alice, "queue", "t0")
            lost = await claim_task(bob, "queue", "t0")
            assert (won.claimed, lost.claimed, lost.holder) == (True, False, "alice")
            assert await complete_task(alice, "queue", "t0", result=42)
            assert not await complete_task(bob, "queue", "t0")
            assert (await claim_task(bob, "queue", "t1")).claimed
            assert await fail_task(bob, "queue", "t1", error="flaky")
            assert "t1" in await get_pending_tasks(bob, "queue")
            # The reference protocol still works where a server has no txn.
            assert (await _claim_by_rereading(bob, "queue", "t2", "bob")).claimed
            assert (await _claim_by_rereading(alice, "queue", "t2", "alice")).holder == "bob"

    asyncio.run(scenario())


def test_claim_next_takes_whatever_task_is_free_until_none_is_left(live_server_url):
    key = a_key()

    async def scenario() -> None:
        tasks = {f"t{n}": {"status": "pending", "kind": "a" if n < 3 else "b"} for n in range(4)}
        async with (
            ZeroLockClient(live_server_url, agent_id="alice", api_key=key) as alice,
            ZeroLockClient(live_server_url, agent_id="bob", api_key=key) as bob,
        ):
            await alice.create_shard("queue", CreateShardOptions(initial_value=tasks))
            first = await claim_next(alice, "queue", where={"status": "pending", "kind": "b"})
            assert first is not None
            assert (first.task_id, first.claimed, first.holder) == ("t3", True, "alice")
            assert first.task == {"status": "claimed", "kind": "b", "holder": "alice"}
            assert first.version == 2
            assert await claim_next(bob, "queue", where={"status": "pending", "kind": "b"}) is None
            lease = await bob.grant_lease(30)
            taken = [await claim_next(bob, "queue", lease_id=lease.id) for _ in range(3)]
            assert sorted(t.task_id for t in taken if t) == ["t0", "t1", "t2"]
            assert await claim_next(alice, "queue") is None
            # What claim_next took, the task helpers finish as they would claim_task's.
            assert await complete_task(bob, "queue", taken[0].task_id, result="ok")
            await bob.revoke_lease(lease.id)  # the others' holders go with the lease
            queue = (await alice.get_shard("queue")).value
            assert queue[taken[0].task_id]["status"] == "done"
            assert "holder" not in queue[taken[1].task_id]
            with pytest.raises(NotFoundError) as missing:
                await claim_next(alice, "no-such-queue")
            assert missing.value.code == "SHARD_NOT_FOUND"
            # The client asks for the queue's value only when told to.
            await alice.create_shard("q2", CreateShardOptions(initial_value=tasks))
            minimal = await alice.claim("q2", where={"kind": "a"}, set={"status": "claimed"})
            assert minimal.value is None
            full = await alice.claim("q2", where={"kind": "a"}, set={"status": "x"}, minimal=False)
            assert full.value[full.task_id] == full.task

    asyncio.run(scenario())


def test_minimal_writes_through_the_sdk_leave_the_value_out(live_server_url):
    key = a_key()

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="planner", api_key=key) as zl:
            await zl.create_shard("plan", CreateShardOptions(initial_value={"step": 1}))
            result = await zl.commit("plan", 1, {"step": 2}, minimal=True)
            assert (result.version, result.value) == (2, None)
            assert (await zl.commit_shard("plan", {"step": 3}, 2)).value == {"step": 3}
            await zl.create_shard("log", CreateShardOptions(type="additive", crdt_type="array"))
            appended = await zl.append("log", [1], minimal=True)
            assert (appended.version, appended.value) == (2, None)
            done = await zl.txn(
                success=[{"op": "put", "shard_id": "plan", "path": ["step"], "value": 4}],
                minimal=True,
            )
            assert (done.succeeded, done.responses, done.versions) == (True, [], {"plan": 4})
        async with CachedZeroLockClient(
            live_server_url, agent_id="cached", api_key=key, auto_connect_ws=False, ttl=60
        ) as cached:
            assert (await cached.get_shard("plan")).value == {"step": 4}
            await cached.commit("plan", 4, {"step": 5}, minimal=True)
            # No value came back to cache: the next read goes to the server.
            assert (await cached.get_shard("plan")).value == {"step": 5}

    asyncio.run(scenario())


def test_file_locks_exclude_expire_when_abandoned_and_go_in_sorted_order(live_server_url):
    key = a_key()

    async def scenario() -> None:
        async with (
            ZeroLockClient(live_server_url, agent_id="a", api_key=key) as a,
            ZeroLockClient(live_server_url, agent_id="b", api_key=key) as b,
        ):
            # b's 0.3 s attempt must fall inside a's hold: 3 s leaves 2.7 s of slack
            # for a loaded machine (1 s left 0.7 s, too little to be sure).
            lock_a, lock_b = FileLock(a, "locks", hold_seconds=3), FileLock(b, "locks")
            await lock_a.ensure_shard()
            await lock_a.acquire("src/app.py")
            with pytest.raises(LockTimeout):
                await lock_b.acquire("src/app.py", timeout_seconds=0.3)
            await asyncio.sleep(3.1)  # a stops renewing: its lock is abandoned
            await lock_b.acquire("src/app.py", timeout_seconds=2)
            assert not await lock_a.release("src/app.py")  # no longer a's to release
            assert await lock_b.release("src/app.py")
            async with FileLocker(lock_b, "z.txt", "a.txt"):
                assert set((await b.get_shard("locks")).value) == {"a.txt", "z.txt"}
                with pytest.raises(LockTimeout):
                    await lock_a.acquire_multiple(["m.txt", "z.txt"], timeout_seconds=0.2)
                assert "m.txt" not in (await a.get_shard("locks")).value  # all or none
            assert (await a.get_shard("locks")).value == {}

    asyncio.run(scenario())


def test_an_agent_waits_for_a_decision_and_gets_the_commit(live_server_url):
    executor_key = a_key()
    officer_key = a_key("approval:decide", "shard:read")

    async def scenario() -> None:
        async with ApprovalClient(
            live_server_url, agent_id="executor", api_key=executor_key
        ) as approvals:
            await approvals.client.create_shard(
                "payments", CreateShardOptions(initial_value=[], reversible=False)
            )
            shard = await approvals.client.get_shard("payments")
            approval = await approvals.request_approval(
                "payments", [{"to": "acme", "amount": 10}], shard.version, "Pay ACME"
            )
            assert approval.status == "pending"

            async def officer() -> None:
                await asyncio.sleep(0.3)
                async with ApprovalClient(
                    live_server_url, agent_id="officer", api_key=officer_key
                ) as o:
                    pending = await o.list_pending_approvals()
                    assert [p.id for p in pending] == [approval.id]
                    await o.approve(approval.id, "ok")

            helper = asyncio.create_task(officer())
            decided = await approvals.wait_for_approval(
                approval.id, timeout_seconds=10, poll_seconds=30
            )
            await helper
            assert decided.status == "approved" and decided.server_status == "committed"
            assert decided.applied and decided.commit["version"] == 2
            assert (await approvals.client.get_shard("payments")).value == [
                {"to": "acme", "amount": 10}
            ]

    asyncio.run(scenario())


def test_watch_through_the_sdk_resumes_from_a_revision(live_server_url):
    key = a_key()

    async def scenario() -> list[int]:
        async with ZeroLockClient(live_server_url, agent_id="w", api_key=key) as zl:
            await zl.create_shard("watched", CreateShardOptions(initial_value=0))
            first = (await zl.commit("watched", 1, 1)).audit_entry_id
            await zl.commit("watched", 2, 2)
            seen = []
            async for change in zl.watch(prefix="watched", since=first - 1):
                seen.append(change["version"])
                if len(seen) == 2:
                    break
            return seen

    assert asyncio.run(scenario()) == [2, 3]


def test_history_follows_the_servers_link_past_its_byte_cap(live_server_url):
    """Six versions of about 0.9 MB pass the server's 4 MB page: the SDK reads on."""
    import httpx

    key = a_key()
    big = "x" * 900_000

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="archivist", api_key=key) as zl:
            await zl.create_shard("tome", CreateShardOptions(initial_value={"text": big}))
            for version in range(1, 6):
                await zl.commit("tome", version, {"text": big, "n": version}, minimal=True)
            first = httpx.get(
                f"{live_server_url}/api/shards/tome/history", headers={"X-API-Key": key}
            )
            assert "next" in first.links and len(first.json()) < 6  # the server did cut it
            history = await zl.history("tome")
            assert [h["version"] for h in history] == [1, 2, 3, 4, 5, 6]

    asyncio.run(scenario())
