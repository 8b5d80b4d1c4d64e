"""Temporal on ZeroLock (``pip install zerolock[temporal]``).

Activities that read, commit and claim through ZeroLock. Temporal retries an
activity whose worker died or timed out, including after the server already
applied its write; so every write these activities make carries an
``Idempotency-Key`` derived from the activity's identity (namespace, workflow
id, run id, activity id), which stays the same across attempts. A retried
attempt gets the first attempt's stored answer from the server instead of
applying a second time (within the server's 24-hour idempotency window).

    activities = ZeroLockActivities(agent_id="orders-worker")
    Worker(client, task_queue="orders", workflows=[...], activities=activities.all())

and, in a workflow::

    shard = await workflow.execute_activity(
        "zerolock.read_shard", ReadShard("orders"), start_to_close_timeout=timedelta(seconds=10)
    )

A stale commit raises a non-retryable ``ApplicationError`` of type
``STALE_VERSION`` (retrying the same version can never succeed: the workflow
re-reads and decides again); other refusals (4xx) are non-retryable too, while
transport errors, 429, 5xx and ``IDEMPOTENCY_IN_PROGRESS`` are left to Temporal's
retry policy.

Every worker of one task queue must use the same API key and ``agent_id``: the
server replays a write only for the key and agent id that first sent it, and a
retried attempt may run on any worker. Who holds a claimed task is a separate
question: ``ClaimTask(holder=workflow.info().workflow_id)`` names the workflow.

Approvals: ``zerolock.request_approval`` asks (keyed like a commit, so a retried
request is one approval), ``zerolock.wait_for_approval`` waits in a heartbeating
activity until a person decides (the server's push ends the wait at once, polling
is the fallback), and the workflow helper ``request_and_wait_for_approval`` runs
both. Approving applies the proposed commit on the server, in the approval's
transaction: the workflow reads the outcome (``applied`` and ``commit``) rather
than committing a second time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from .approvals import ApprovalClient
from .errors import ZeroLockError
from .idempotency import StepCalls, step_idempotency_key
from .models import Approval
from .task_claim import claim_task


@dataclass(frozen=True)
class ReadShard:
    shard_id: str


@dataclass(frozen=True)
class CommitShard:
    shard_id: str
    new_value: Any
    expected_version: int


@dataclass(frozen=True)
class ClaimTask:
    shard_id: str
    task_id: str
    # Written as the task's holder; None: the worker's agent id. A workflow passes
    # its own id, so the holder is the same whichever worker runs the attempt.
    holder: str | None = None


@dataclass(frozen=True)
class RequestApproval:
    shard_id: str
    proposed_value: Any
    expected_version: int
    description: str
    ttl_seconds: int = 3600


@dataclass(frozen=True)
class WaitForApproval:
    approval_id: str
    # Polling is only the fallback: the server's push over the socket ends the wait.
    poll_seconds: float = 5.0


# The longest an approval can stay pending (the server's 7-day TTL cap): past it
# the server reports it expired, so a wait never needs a longer bound.
MAX_APPROVAL_WAIT = timedelta(days=7, minutes=5)


def activity_idempotency_key(info: activity.Info | None = None) -> str:
    """The same for every attempt of one activity execution, different for any
    other: namespace, workflow id, run id and activity id (never the attempt)."""
    info = info or activity.info()
    parts = (
        info.workflow_namespace or info.namespace,
        info.workflow_id or "",
        info.workflow_run_id or "",
        info.activity_id,
        getattr(info, "activity_run_id", None) or "",
    )
    return step_idempotency_key("temporal", *parts)


class ZeroLockActivities(StepCalls):
    """Holds the connection settings; ``all()`` lists the activities for a Worker.
    URL and key default to ``$ZEROLOCK_URL`` and ``$ZEROLOCK_API_KEY``."""

    default_agent_id = "temporal"

    def terminal(self, error: ZeroLockError) -> Exception:
        return ApplicationError(
            f"{error.code}: {error.message}",
            {"code": error.code, **error.details},
            type=error.code,
            non_retryable=True,
        )

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.read_shard,
            self.commit_shard,
            self.claim_task,
            self.request_approval,
            self.wait_for_approval,
        ]

    @activity.defn(name="zerolock.read_shard")
    async def read_shard(self, request: ReadShard) -> dict[str, Any]:
        shard = await self._call(lambda zl: zl.get_shard(request.shard_id))
        return {"shard_id": shard.id, "version": shard.version, "value": shard.value}

    @activity.defn(name="zerolock.commit_shard")
    async def commit_shard(self, request: CommitShard) -> dict[str, Any]:
        key = activity_idempotency_key()
        result = await self._call(
            lambda zl: zl.commit_shard(
                request.shard_id, request.new_value, request.expected_version, idempotency_key=key
            )
        )
        return {
            "version": result.version,
            "value": result.value,
            "audit_entry_id": result.audit_entry_id,
        }

    @activity.defn(name="zerolock.claim_task")
    async def claim_task(self, request: ClaimTask) -> dict[str, Any]:
        key = activity_idempotency_key()
        result = await self._call(
            lambda zl: claim_task(
                zl, request.shard_id, request.task_id, request.holder, idempotency_key=key
            )
        )
        return {"task_id": result.task_id, "claimed": result.claimed, "holder": result.holder}

    @activity.defn(name="zerolock.request_approval")
    async def request_approval(self, request: RequestApproval) -> dict[str, Any]:
        key = activity_idempotency_key()
        approval = await self._call(
            lambda zl: zl.request_approval(
                request.shard_id,
                request.proposed_value,
                request.expected_version,
                request.description,
                ttl_seconds=request.ttl_seconds,
                idempotency_key=key,
            )
        )
        return approval_outcome(approval)

    @activity.defn(name="zerolock.wait_for_approval")
    async def wait_for_approval(self, request: WaitForApproval) -> dict[str, Any]:
        """Until the approval is decided (or expired). Only reads: a retried
        attempt simply waits again. It heartbeats, so give it a heartbeat_timeout
        and a dead worker's wait moves to another worker that soon."""
        beat = activity.info().heartbeat_timeout
        every = min(5.0, beat.total_seconds() / 3) if beat else 5.0

        async def heartbeat() -> None:
            while True:
                activity.heartbeat()
                await asyncio.sleep(every)

        beating = asyncio.create_task(heartbeat())
        try:
            async with ApprovalClient(self._base_url, **self._options) as approvals:
                try:
                    approval = await approvals.wait_for_approval(
                        request.approval_id,
                        poll_seconds=request.poll_seconds,
                        timeout_seconds=MAX_APPROVAL_WAIT.total_seconds(),
                    )
                except ZeroLockError as error:
                    self.refused(error)
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
        return approval_outcome(approval)


def approval_outcome(approval: Approval) -> dict[str, Any]:
    """What a workflow needs of an approval: ``status`` in the SDK's words
    ("pending", "approved" = approved and applied, "rejected", "expired",
    "approved_stale" = approved but not applied), ``applied`` and ``commit`` (the
    version the approval's own commit wrote, or its ``error``: ``STALE_VERSION``
    when the shard moved on, so read again and ask again)."""
    return {
        "approval_id": approval.id,
        "status": approval.status,
        "server_status": approval.server_status,
        "applied": approval.applied,
        "commit": approval.commit,
        "reason": approval.reason,
        "decided_by": approval.decided_by,
    }


async def request_and_wait_for_approval(
    request: RequestApproval,
    *,
    poll_seconds: float = 5.0,
    heartbeat_timeout: timedelta = timedelta(seconds=30),
    step_timeout: timedelta = timedelta(seconds=30),
) -> dict[str, Any]:
    """Workflow code: request an approval and wait for its decision, returning
    ``approval_outcome``'s dict. The wait is one activity that may last as long as
    the approval's TTL; a worker dying during it costs ``heartbeat_timeout`` before
    another worker resumes the wait."""
    requested = await workflow.execute_activity(
        "zerolock.request_approval",
        request,
        start_to_close_timeout=step_timeout,
        retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
        result_type=dict,
    )
    decided: dict[str, Any] = await workflow.execute_activity(
        "zerolock.wait_for_approval",
        WaitForApproval(requested["approval_id"], poll_seconds),
        start_to_close_timeout=timedelta(seconds=request.ttl_seconds) + step_timeout,
        heartbeat_timeout=heartbeat_timeout,
        retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
        result_type=dict,
    )
    return decided
