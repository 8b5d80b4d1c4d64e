"""The one rule every durable-execution adapter (Temporal, Restate, Inngest)
follows for its writes: the ``Idempotency-Key`` is the identity of the step,
never of the attempt. Every retry of one step sends the same key (the server
answers it with the first attempt's stored answer), and any other step, run or
invocation sends another (docs/runtimes.md, "The rule")."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

from .client import ZeroLockClient
from .errors import RateLimitedError, ZeroLockError

T = TypeVar("T")

MAX_KEY = 255  # the server's limit on Idempotency-Key


def step_idempotency_key(runtime: str, *identity: str) -> str:
    """``runtime:part:part...``, readable in the server's records; past the
    server's length limit, a hash of the same parts (still one key per step)."""
    key = f"{runtime}:" + ":".join(identity)
    if len(key) <= MAX_KEY:
        return key
    return f"{runtime}:sha256:" + hashlib.sha256("\x00".join(identity).encode()).hexdigest()


# A copy that arrives while the first attempt still runs: the next try replays it.
RETRYABLE_CODES = frozenset({"IDEMPOTENCY_IN_PROGRESS"})


def retry_may_succeed(error: ZeroLockError) -> bool:
    """Whether the runtime should retry the step. A refusal (4xx: a stale
    version, a permission, a validation error) is an answer that the same request
    can never change, so the step must fail for good and the handler decide again;
    rate limits, server errors and a replay still in progress pass."""
    return (
        isinstance(error, RateLimitedError) or error.status >= 500 or error.code in RETRYABLE_CODES
    )


class StepCalls:
    """What the Temporal, Restate and Inngest adapters share around each call: a
    fresh client per step (a step may run on any worker, in any event loop; URL
    and key default to ``$ZEROLOCK_URL`` and ``$ZEROLOCK_API_KEY``, the other
    ``client_options`` go to each ``ZeroLockClient``), and ``retry_may_succeed``'s
    verdict on a refusal: one a retry cannot change is raised as the runtime's own
    do-not-retry error (``terminal``), the rest as they are, for the runtime to
    retry."""

    default_agent_id = "agent"

    def __init__(
        self,
        base_url: str | None = None,
        *,
        agent_id: str | None = None,
        api_key: str | None = None,
        **client_options: Any,
    ) -> None:
        self._base_url = base_url
        self._options = {
            "agent_id": agent_id or self.default_agent_id,
            "api_key": api_key,
            **client_options,
        }

    def terminal(self, error: ZeroLockError) -> Exception:
        """The runtime's error that ends the step for good."""
        raise NotImplementedError

    def refused(self, error: ZeroLockError) -> NoReturn:
        if retry_may_succeed(error):
            raise error
        raise self.terminal(error) from error

    async def _call(self, work: Callable[[ZeroLockClient], Awaitable[T]]) -> T:
        async with ZeroLockClient(self._base_url, **self._options) as client:
            try:
                return await work(client)
            except ZeroLockError as error:
                self.refused(error)

    async def approval_asked(
        self,
        key: str,
        shard_id: str,
        proposed_value: Any,
        expected_version: int,
        description: str,
        ttl_seconds: int,
    ) -> dict[str, Any]:
        """The body of a request-approval step: asked with the step's key, so a
        re-run gets the same approval back; the server's JSON, for the journal."""
        approval = await self._call(
            lambda zl: zl.request_approval(
                shard_id,
                proposed_value,
                expected_version,
                description,
                ttl_seconds=ttl_seconds,
                idempotency_key=key,
            )
        )
        return approval.raw
