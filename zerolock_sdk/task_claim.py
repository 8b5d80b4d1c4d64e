"""Task claiming on a decision shard: ``{"task-id": {"status": "pending", ...}}``.

``claim_next`` asks the server for any pending task: one request, which either
claims one or says there is nothing left (no agent ever loses a request to
another's claim). ``claim_task`` claims a task you name: with the server's
transaction endpoint, one request that wins or says who holds the task; against
a server without it, the reference protocol runs instead: write with the
version read, wait, re-read, decide."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .client import ZeroLockClient
from .errors import NotFoundError, StaleCommitError
from .models import ClaimResult, Task

__all__ = [
    "ClaimResult",
    "Task",
    "claim_next",
    "claim_task",
    "complete_task",
    "fail_task",
    "get_pending_tasks",
]


async def get_pending_tasks(client: ZeroLockClient, shard_id: str) -> list[Task]:
    """The pending tasks, sorted by id: each has ``.id`` and ``.data`` (and, being
    a ``str``, still compares equal to its id)."""
    shard = await client.get_shard(shard_id)
    return [
        Task(task_id, task)
        for task_id, task in sorted((shard.value or {}).items())
        if isinstance(task, dict) and task.get("status") == "pending"
    ]


async def claim_task(
    client: ZeroLockClient,
    shard_id: str,
    task_id: str,
    agent_id: str | None = None,
    *,
    lease_id: str | None = None,
    idempotency_key: str | None = None,
) -> ClaimResult:
    """Claims a pending task: one transaction that wins, or says who holds it.
    With ``idempotency_key``, a retry of a claim that won replays that win."""
    task_id, agent = str(task_id), agent_id or client.agent_id
    holder_op: dict[str, Any] = {
        "op": "put",
        "shard_id": shard_id,
        "path": [task_id, "holder"],
        "value": agent,
    }
    if lease_id:
        holder_op["lease_id"] = lease_id
    try:
        result = await client.txn(
            compare=[
                {"shard_id": shard_id, "path": [task_id, "status"], "op": "==", "value": "pending"}
            ],
            success=[
                {
                    "op": "put",
                    "shard_id": shard_id,
                    "path": [task_id, "status"],
                    "value": "claimed",
                },
                holder_op,
            ],
            failure=[{"op": "get", "shard_id": shard_id, "path": [task_id]}],
            idempotency_key=idempotency_key,
        )
    except NotFoundError as error:
        if error.code == "SHARD_NOT_FOUND":
            raise
        return await _claim_by_rereading(client, shard_id, task_id, agent)
    if result.succeeded:
        return ClaimResult(task_id, True, agent)
    task = result.responses[0].get("value") or None
    return ClaimResult(task_id, False, (task or {}).get("holder"), task)


async def claim_next(
    client: ZeroLockClient,
    queue: str,
    *,
    where: dict[str, Any] | None = None,
    set: dict[str, Any] | None = None,
    lease_id: str | None = None,
    idempotency_key: str | None = None,
) -> ClaimResult | None:
    """Claims whichever task the server picks among those whose fields equal
    ``where`` (default: pending), setting ``set`` (default: claimed) and the
    holder (this client's agent); None when no task matches. With ``lease_id``
    the holder goes when the lease ends, as with ``claim_task``."""
    try:
        claimed = await client.claim(
            queue,
            where=where or {"status": "pending"},
            set=set or {"status": "claimed"},
            lease_id=lease_id,
            idempotency_key=idempotency_key,
        )
    except NotFoundError as error:
        if error.code == "NOTHING_TO_CLAIM":
            return None
        raise
    holder = claimed.task.get("holder")
    return ClaimResult(claimed.task_id, True, holder, claimed.task, claimed.version)


async def _claim_by_rereading(
    client: ZeroLockClient, shard_id: str, task_id: str, agent: str, wait: float = 0.05
) -> ClaimResult:
    """write -> wait -> re-read -> decide (the reference design's protocol)."""
    while True:
        shard = await client.get_shard(shard_id)
        task = dict((shard.value or {}).get(task_id) or {})
        if task.get("status") != "pending":
            return ClaimResult(task_id, task.get("holder") == agent, task.get("holder"), task)
        value = dict(shard.value)
        value[task_id] = {**task, "status": "claimed", "holder": agent}
        try:
            await client.commit(shard_id, shard.version, value, minimal=True)
        except StaleCommitError:
            continue
        await asyncio.sleep(wait)
        check = (await client.get_shard(shard_id)).value[task_id]
        return ClaimResult(task_id, check.get("holder") == agent, check.get("holder"), check)


async def _finish(
    client: ZeroLockClient,
    shard_id: str,
    task_id: str,
    status: str,
    extra: dict[str, Any],
    agent_id: str | None = None,
    drop: tuple[str, ...] = (),
) -> bool:
    """One transaction: if the agent holds the task, sets its status and ``extra``
    fields and removes the ``drop`` fields; else writes nothing (False)."""
    result = await client.txn(
        compare=[
            {
                "shard_id": shard_id,
                "path": [task_id, "holder"],
                "op": "==",
                "value": agent_id or client.agent_id,
            }
        ],
        success=[
            {"op": "put", "shard_id": shard_id, "path": [task_id, "status"], "value": status},
            *(
                {"op": "put", "shard_id": shard_id, "path": [task_id, k], "value": v}
                for k, v in extra.items()
            ),
            *({"op": "delete", "shard_id": shard_id, "path": [task_id, k]} for k in drop),
        ],
        minimal=True,  # only whether it held is read
    )
    return result.succeeded


async def complete_task(
    client: ZeroLockClient,
    shard_id: str,
    task_id: str,
    agent_id: str | None = None,
    *,
    result: Any = None,
) -> bool:
    """Marks a task ``agent_id`` (default: the client's agent) holds done, with an
    optional ``result``; False if it does not hold it (any more)."""
    extra = {"result": result} if result is not None else {}
    return await _finish(client, shard_id, task_id, "done", extra, agent_id)


async def fail_task(
    client: ZeroLockClient, shard_id: str, task_id: str, error: str = "", retry: bool = True
) -> bool:
    """Gives a task the client's agent holds back (``retry``: pending again, its
    holder removed) or marks it failed; ``error`` is recorded. One transaction,
    so no claimant sees the task pending with its old holder (the holder used to
    be removed by a second request, which could remove the next claimant's)."""
    status = "pending" if retry else "failed"
    extra = {"error": error} if error else {}
    return await _finish(
        client, shard_id, task_id, status, extra, drop=("holder",) if retry else ()
    )


def claim_tool_answer(task_id: str | None, result: ClaimResult | None) -> str:
    """What the LangGraph and CrewAI ``claim_task`` tools tell the model, as JSON:
    the task id, whether it is now yours, who holds it, and (for a task the
    server picked) the task itself. ``result`` None: nothing left to claim."""
    if result is None:
        return json.dumps({"task_id": None, "claimed": False, "holder": None})
    answer: dict[str, Any] = {
        "task_id": task_id if task_id is not None else result.task_id,
        "claimed": result.claimed,
        "holder": result.holder,
    }
    if task_id is None:
        answer["task"] = result.task
    return json.dumps(answer)
