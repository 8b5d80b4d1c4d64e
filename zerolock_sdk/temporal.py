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
retry policy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .client import ZeroLockClient
from .errors import ZeroLockError
from .idempotency import retry_may_succeed, step_idempotency_key
from .task_claim import claim_task

T = TypeVar("T")


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


class ZeroLockActivities:
    """Holds the connection settings; ``all()`` lists the activities for a Worker.
    URL and key default to ``$ZEROLOCK_URL`` and ``$ZEROLOCK_API_KEY``."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        agent_id: str = "temporal",
        api_key: str | None = None,
        **client_options: Any,
    ) -> None:
        self._options = {"agent_id": agent_id, "api_key": api_key, **client_options}
        self._base_url = base_url

    def all(self) -> list[Callable[..., Any]]:
        return [self.read_shard, self.commit_shard, self.claim_task]

    async def _with_client(self, work: Callable[[ZeroLockClient], Awaitable[T]]) -> T:
        async with ZeroLockClient(self._base_url, **self._options) as client:
            try:
                return await work(client)
            except ZeroLockError as error:
                raise _as_temporal(error) from error

    @activity.defn(name="zerolock.read_shard")
    async def read_shard(self, request: ReadShard) -> dict[str, Any]:
        shard = await self._with_client(lambda zl: zl.get_shard(request.shard_id))
        return {"shard_id": shard.id, "version": shard.version, "value": shard.value}

    @activity.defn(name="zerolock.commit_shard")
    async def commit_shard(self, request: CommitShard) -> dict[str, Any]:
        key = activity_idempotency_key()
        result = await self._with_client(
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
        result = await self._with_client(
            lambda zl: claim_task(zl, request.shard_id, request.task_id, idempotency_key=key)
        )
        return {"task_id": result.task_id, "claimed": result.claimed, "holder": result.holder}


def _as_temporal(error: ZeroLockError) -> Exception:
    """Refusals that a retry cannot change stop the retries; the rest go on."""
    if retry_may_succeed(error):
        return error
    return ApplicationError(
        f"{error.code}: {error.message}",
        {"code": error.code, **error.details},
        type=error.code,
        non_retryable=True,
    )
