"""One-request claims (docs/api.md, "Claim a task"): the server picks a free task.

A queue is a decision shard whose value is an object of tasks,
``{"task-id": {"status": "pending", ...}}`` (the shape ``zerolock_sdk.task_claim``
works on). A claim names what a free task looks like (``where``) and what it
becomes (``set``); the server picks one matching task, sets those fields and the
holder, and writes it as one new version. The queue is read inside the write
transaction, so a claim never loses to a stale read: while any task matches, a
claim gets one. A transaction claim (``POST /api/txn``) needs the agent to name the
task, and contending agents that named the same one all but one lose a request.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

from access.identity import Actor
from common.errors import ApiError, ErrorCode, ShardNotFound, UnsupportedDiff
from metrics import record
from shards.models import Shard, ShardType
from shards.rules import WriteRules, rules_precheck
from shards.selectors import shard_get
from shards.writer import CommitResult, group_commit, version_write
from shards.writetx import WriteTx

from .leases import lease_bind
from .txn import Compare, compare_holds

# The field that names a task's holder: the one claim_task writes, and the path a
# lease's end removes (a crashed holder's tasks show no holder).
HOLDER = "holder"


@dataclass(frozen=True)
class Claim:
    task_id: str
    task: dict[str, Any]
    result: CommitResult

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "task": self.task,
            "version": self.result.version,
            "audit_entry_id": self.result.audit_entry_id,
            "value": self.result.value,
        }


def _not_a_queue(shard_id: str) -> ApiError:
    return UnsupportedDiff(
        f"Claims are for decision shards whose value is an object of tasks; {shard_id!r} "
        "is not one.",
        shard_id=shard_id,
    )


def task_claim(
    *,
    actor: Actor,
    shard_id: str,
    where: dict[str, Any],
    set_fields: dict[str, Any],
    lease_id: str | None = None,
    fence: int | None = None,
) -> Claim:
    """Claims one task of the queue ``shard_id`` whose fields equal ``where``:
    ``set_fields`` and the holder (the acting agent) are set, in one version-checked
    write; with ``lease_id``, the holder goes when that lease ends. 404
    NOTHING_TO_CLAIM when no task matches."""
    shard = shard_get(shard_id, payload=False)
    if shard.type != ShardType.DECISION:
        raise _not_a_queue(shard_id)
    rules = WriteRules(fence=fence, versioned=False)
    # Owners and the gate before the lock, as for any commit (and again under it).
    rules_precheck(shard, actor, rules, expected_version=shard.version, value=None)

    # In a write transaction (expired leases end first: their tasks show it),
    # shared with the process's concurrent writes (group commit), each in its own
    # savepoint: claims of one batch read the queue as the ones before them left it.
    def work(tx: WriteTx) -> Claim | int:
        return _claim_locked(tx, actor, shard, where, set_fields, lease_id, rules)

    claim = group_commit.run(work)
    if not isinstance(claim, Claim):
        # Raised after the transaction, not inside it: what its sweeps did stays done.
        # The version read tells the caller how far the queue had got (a watch
        # from it hears of tasks put back).
        raise ApiError(
            ErrorCode.NOTHING_TO_CLAIM,
            f"No task in {shard_id!r} matches where.",
            shard_id=shard_id,
            version=claim,
        )
    record.recorder.count(record.CLAIMS)
    return claim


def _claim_locked(
    tx: WriteTx,
    actor: Actor,
    shard: Shard,
    where: dict[str, Any],
    set_fields: dict[str, Any],
    lease_id: str | None,
    rules: WriteRules,
) -> Claim | int:
    """The claim written, or the version of a queue with nothing to claim."""
    # Read under the write lock: no other write can come between this read and
    # the version written below, so the pick is never stale.
    row = (
        Shard.objects.filter(pk=shard.id, incarnation=shard.incarnation)
        .values("version", "value")
        .first()
    )
    if row is None:
        raise ShardNotFound(shard.id)
    queue = row["value"]
    if not isinstance(queue, dict):
        raise _not_a_queue(shard.id)
    # Each where field holds as a transaction's == compare on [task, field] does.
    compares = [Compare(shard.id, "==", (field,), value) for field, value in where.items()]
    free = [
        task_id
        for task_id, task in queue.items()
        if isinstance(task, dict) and all(compare_holds(c, shard, task) for c in compares)
    ]
    if not free:
        return int(row["version"])
    # Any free task will do. A random one rather than the first: were claims ever
    # decided on a read outside the lock (a cache, a batch), claimants that read
    # the same queue would still spread over it instead of all taking the first.
    task_id = random.choice(free)
    task = {**queue[task_id], **set_fields, HOLDER: actor.agent_id}
    value = {**queue, task_id: task}
    if lease_id:
        lease_bind(
            lease_id=lease_id,
            holder=actor.agent_id,
            key_prefix=actor.key_prefix,
            shard=shard,
            path=[task_id, HOLDER],
        )
    # The value is made here, from the queue as the lock shows it: the writer
    # checks it against the schema (within its budget) with the other rules.
    details = {"claim": task_id, **({"lease_id": lease_id} if lease_id else {})}
    result = version_write(
        tx=tx,
        shard=shard,
        actor=actor,
        expected_version=row["version"],
        value=value,
        rules=dataclasses.replace(rules, details=details),
    )
    if result is None:  # read under this same lock: only a deletion can do this
        raise ShardNotFound(shard.id)
    return Claim(task_id, task, result)
