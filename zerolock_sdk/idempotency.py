"""The one rule every durable-execution adapter (Temporal, Restate, Inngest)
follows for its writes: the ``Idempotency-Key`` is the identity of the step,
never of the attempt. Every retry of one step sends the same key (the server
answers it with the first attempt's stored answer), and any other step, run or
invocation sends another (docs/runtimes.md, "The rule")."""

from __future__ import annotations

import hashlib

from .errors import RateLimitedError, ZeroLockError

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
