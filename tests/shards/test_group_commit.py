"""Group commit: writes that queue while a batch is being written share the
next transaction, and each keeps its own OCC check, version, audit entry and
answer. A stale write in a batch gets its own 409; a write that fails is rolled
back alone; the others commit.

The batch is arranged, not raced for: a first write holds the leader's seat
until the others have queued (the database and the services are real; only the
timing is arranged). The live storm tests elsewhere race for real on the same
path (tests/shards/test_concurrent_commits.py, tests/shards/test_stale_precheck.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import close_old_connections

from access.identity import Actor
from audit.chain import verify_chain
from audit.models import AuditAction, AuditEntry
from common.errors import ApiError
from shards import services
from shards.models import Shard
from shards.rules import WriteRules
from shards.selectors import shard_get
from shards.writer import group_commit, version_write

pytestmark = pytest.mark.django_db(transaction=True)

BOB = Actor(agent_id="bob")


def _in_thread(fn: Callable[[], Any], answers: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        try:
            answers[name] = fn()
        except Exception as error:  # noqa: BLE001 -- the answer under test
            answers[name] = error
        finally:
            close_old_connections()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _one_batch(
    writes: dict[str, Callable[[], Any]], *, queueing: int | None = None
) -> tuple[dict[str, Any], int]:
    """Runs ``writes`` from threads of their own, queued behind a write that
    holds the leader's seat until all of them are waiting: they are then written
    as one batch. Returns each write's answer and how many transactions the
    group committer made for them. ``queueing``: how many of them reach the
    queue (default: all; a write refused before the lock never does)."""
    seated = threading.Event()
    queued = threading.Event()
    answers: dict[str, Any] = {}

    def hold_the_seat(audit: Any) -> str:
        seated.set()
        assert queued.wait(30), "the writes never queued"
        return "held"

    before = group_commit.batches
    holder = _in_thread(lambda: group_commit.run(hold_the_seat), answers, "holder")
    # Seated, not merely "the leader's lock is taken": only then is every write
    # started below sure to wait in the queue rather than join the holder's batch.
    assert seated.wait(30), f"the holder never took the leader's seat: {answers}"
    threads = [_in_thread(fn, answers, name) for name, fn in writes.items()]
    deadline = time.monotonic() + 30
    while len(group_commit._queue) < (len(writes) if queueing is None else queueing):
        # A write answered before it queued (refused, or no database connection
        # to be had) would otherwise leave this loop waiting for nothing.
        early = {name: answers[name] for name in writes if name in answers}
        assert time.monotonic() < deadline and (queueing is not None or not early), (
            f"the writes never queued: {len(group_commit._queue)} queued, answered early: {early}"
        )
        time.sleep(0.001)
    queued.set()
    for thread in [holder, *threads]:
        thread.join(60)
    assert answers.pop("holder") == "held"
    return answers, group_commit.batches - before


def _counter(shard_id: str) -> None:
    services.shard_create(actor=BOB, shard_id=shard_id, shard_type="decision", initial_value=0)


def _commit(agent: str, shard_id: str, expected: int, value: Any) -> Callable[[], Any]:
    return lambda: services.shard_commit(
        actor=Actor(agent_id=agent),
        shard=shard_get(shard_id, payload=False),
        expected_version=expected,
        new_value=value,
    )


def test_writes_queued_behind_a_batch_share_one_transaction_and_each_gets_its_version():
    for n in range(8):
        _counter(f"gc.own.{n}")
    writes = {f"agent-{n}": _commit(f"agent-{n}", f"gc.own.{n}", 1, n) for n in range(8)}
    answers, transactions = _one_batch(writes)
    assert transactions == 2  # the seat holder's, then all eight together
    for n in range(8):
        assert answers[f"agent-{n}"].version == 2, answers[f"agent-{n}"]
        assert Shard.objects.get(pk=f"gc.own.{n}").value == n
    checked, broken = verify_chain()
    assert broken is None and checked > 8
    commits = AuditEntry.objects.filter(
        action=AuditAction.SHARD_COMMIT, shard_id__startswith="gc.own."
    )
    assert commits.count() == 8


def test_a_stale_write_in_a_batch_gets_its_own_409_and_never_poisons_the_others():
    _counter("gc.race")
    _counter("gc.calm")
    services.shard_create(
        actor=BOB,
        shard_id="gc.typed",
        shard_type="decision",
        initial_value=0,
        value_schema={"type": "integer"},
    )
    writes = {
        # Five agents bet on version 1 of one counter: one wins, four are stale.
        **{f"racer-{n}": _commit(f"racer-{n}", "gc.race", 1, f"racer-{n}") for n in range(5)},
        "calm": _commit("calm", "gc.calm", 1, "calm"),
        # Refused before it queues (schema), and one that expects a version not
        # yet reached: decided under the lock, in the batch, with its own answer.
        "typed": _commit("typed", "gc.typed", 1, "not an integer"),
        "ahead": _commit("ahead", "gc.calm", 7, "ahead"),
    }
    answers, transactions = _one_batch(writes, queueing=len(writes) - 1)
    assert transactions == 2

    racers = {name: answers[name] for name in answers if name.startswith("racer-")}
    won = [name for name, a in racers.items() if not isinstance(a, Exception)]
    lost = [a for a in racers.values() if isinstance(a, ApiError)]
    assert len(won) == 1 and len(lost) == 4, racers
    assert all(e.code == "STALE_VERSION" and e.details["current_version"] == 2 for e in lost)
    assert Shard.objects.get(pk="gc.race").value == won[0]

    assert answers["calm"].version == 2
    assert isinstance(answers["typed"], ApiError) and answers["typed"].code == "SCHEMA_VIOLATION"
    assert isinstance(answers["ahead"], ApiError) and answers["ahead"].code == "STALE_VERSION"
    assert Shard.objects.get(pk="gc.calm").value == "calm"

    # Every refusal decided in the batch was audited, and the chain holds.
    refused = AuditEntry.objects.filter(shard_id__in=["gc.race", "gc.calm"]).exclude(
        action__in=[AuditAction.SHARD_COMMIT, AuditAction.SHARD_CREATE]
    )
    assert refused.count() == 5
    checked, broken = verify_chain()
    assert broken is None


def test_a_write_that_fails_in_a_batch_is_rolled_back_alone():
    _counter("gc.a")
    _counter("gc.b")

    def fails_after_writing() -> Any:
        def work(tx: Any) -> None:
            shard = shard_get("gc.b", payload=False)
            version_write(
                tx=tx, shard=shard, actor=BOB, expected_version=1, value="half", rules=WriteRules()
            )
            raise RuntimeError("the write failed after its version and audit entry")

        return group_commit.run(work)

    answers, _ = _one_batch(
        {"first": _commit("alice", "gc.a", 1, "a"), "broken": fails_after_writing}
    )
    assert answers["first"].version == 2
    assert isinstance(answers["broken"], RuntimeError)
    assert Shard.objects.get(pk="gc.b").version == 1  # its version and entry rolled back
    assert not AuditEntry.objects.filter(shard_id="gc.b", action=AuditAction.SHARD_COMMIT).exists()
    checked, broken = verify_chain()
    assert broken is None


def test_appends_in_one_batch_build_on_each_other_without_losing_an_item():
    services.shard_create(
        actor=BOB, shard_id="gc.log", shard_type="additive", crdt_type="array", initial_value=[]
    )

    def append(item: str) -> Callable[[], Any]:
        return lambda: services.additive_commit(
            actor=Actor(agent_id=item),
            shard=shard_get("gc.log", payload=False),
            body={"append": [item]},
        )

    answers, transactions = _one_batch({f"w{n}": append(f"w{n}") for n in range(12)})
    assert transactions == 2
    assert sorted(a.version for a in answers.values()) == list(range(2, 14))
    shard = shard_get("gc.log")
    assert sorted(services.shard_current_value(shard)) == sorted(f"w{n}" for n in range(12))
    # The process's cached Doc is the committed one: a fresh build agrees.
    from shards import crdt_store

    assert crdt_store.read("gc.log", "array").value == services.shard_current_value(shard)
