"""Inngest on ZeroLock (``pip install zerolock[inngest]``).

Inngest runs a function's ``step.run`` steps at least once and memoizes each
step's result; a step whose request died after ZeroLock applied its write runs
again. Every write these helpers make carries an ``Idempotency-Key`` made of the
run id and the step id (``zerolock_sdk.idempotency``; a step id used twice in one
run is counted the way Inngest counts it), so the server answers a re-run with
the first attempt's stored answer.

    zl = InngestZeroLock(agent_id="payouts")            # $ZEROLOCK_URL, $ZEROLOCK_API_KEY

    @client.create_function(fn_id="book", trigger=inngest.TriggerEvent(event="payout/created"))
    async def book(ctx: inngest.Context) -> int:
        seen = await zl.read_shard(ctx, "read-ledger", "ledger")
        value = {**seen["value"], ctx.event.data["id"]: ctx.event.data["amount"]}
        done = await zl.commit_shard(ctx, "commit-ledger", "ledger", value, seen["version"])
        return done["version"]

A refusal that a retry cannot change (``STALE_VERSION``, a permission, a schema)
becomes ``inngest.NonRetriableError``; transport errors, 429 and 5xx are left to
Inngest's retries.

Approvals: ``wait_for_approval`` parks the run on ``step.wait_for_event`` for
``zerolock/approval.decided`` with this approval's id. The event comes from
``approval_webhook_bridge``, which receives ZeroLock's signed webhook and sends
it to Inngest as an event whose id is the webhook id (Inngest drops a second
event with the same id, so ZeroLock's retries of one delivery count once).
Inngest only matches events sent after the wait began, so the helper reads the
approval in a step first (decided already: no wait) and again after a timeout."""

from __future__ import annotations

import datetime
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import inngest

from .errors import ZeroLockError
from .idempotency import StepCalls, step_idempotency_key
from .task_claim import claim_task
from .webhooks import webhook_receiver

EVENT_PREFIX = "zerolock/"
DECIDED_EVENT = EVENT_PREFIX + "approval.decided"

# Step ids seen per function execution: Inngest re-runs the function's code from
# the top for every step, in the same order, so the n-th use of one id in a run
# is the same step each time (Inngest's own rule for repeated ids).
_seen: weakref.WeakKeyDictionary[Any, Counter[str]] = weakref.WeakKeyDictionary()


def step_key(ctx: inngest.Context, step_id: str) -> str:
    """The Idempotency-Key of step ``step_id`` of this run."""
    seen = _seen.setdefault(ctx.step, Counter())
    seen[step_id] += 1
    parts = [ctx.run_id, step_id] + ([str(seen[step_id] - 1)] if seen[step_id] > 1 else [])
    return step_idempotency_key("inngest", *parts)


class InngestZeroLock(StepCalls):
    """ZeroLock steps for Inngest functions. URL and key default to
    ``$ZEROLOCK_URL`` and ``$ZEROLOCK_API_KEY``; ``client_options`` go to each
    step's ``ZeroLockClient``."""

    default_agent_id = "inngest"

    def terminal(self, error: ZeroLockError) -> Exception:
        return inngest.NonRetriableError(f"{error.code}: {error.message}")

    async def read_shard(self, ctx: inngest.Context, step_id: str, shard_id: str) -> dict[str, Any]:
        """The shard as read once (memoized), so a write computed from it sends
        the same body on every attempt."""
        step_key(ctx, step_id)  # counted like every step

        async def read() -> dict[str, Any]:
            shard = await self._call(lambda zl: zl.get_shard(shard_id))
            return {"shard_id": shard.id, "version": shard.version, "value": shard.value}

        return await ctx.step.run(step_id, read)

    async def commit_shard(
        self,
        ctx: inngest.Context,
        step_id: str,
        shard_id: str,
        new_value: Any,
        expected_version: int,
    ) -> dict[str, Any]:
        key = step_key(ctx, step_id)

        async def commit() -> dict[str, Any]:
            result = await self._call(
                lambda zl: zl.commit_shard(
                    shard_id, new_value, expected_version, idempotency_key=key
                )
            )
            return {
                "version": result.version,
                "value": result.value,
                "audit_entry_id": result.audit_entry_id,
            }

        return await ctx.step.run(step_id, commit)

    async def claim_task(
        self, ctx: inngest.Context, step_id: str, shard_id: str, task_id: str
    ) -> dict[str, Any]:
        key = step_key(ctx, step_id)

        async def claim() -> dict[str, Any]:
            result = await self._call(
                lambda zl: claim_task(zl, shard_id, task_id, idempotency_key=key)
            )
            return {"task_id": result.task_id, "claimed": result.claimed, "holder": result.holder}

        return await ctx.step.run(step_id, claim)

    async def request_approval(
        self,
        ctx: inngest.Context,
        step_id: str,
        shard_id: str,
        proposed_value: Any,
        expected_version: int,
        description: str,
        *,
        ttl_seconds: int = 3600,
    ) -> dict[str, Any]:
        """Asks once (memoized, keyed): a re-run gets the same approval back."""
        key = step_key(ctx, step_id)

        async def ask() -> dict[str, Any]:
            return await self.approval_asked(
                key, shard_id, proposed_value, expected_version, description, ttl_seconds
            )

        return await ctx.step.run(step_id, ask)

    async def wait_for_approval(
        self,
        ctx: inngest.Context,
        step_id: str,
        approval_id: str,
        *,
        timeout: datetime.timedelta = datetime.timedelta(hours=1),
    ) -> dict[str, Any]:
        """The approval once decided, as the server shows it (``status``
        "committed", "rejected", "approved_stale", "expired"), or still
        "pending" if ``timeout`` passed first. Steps: ``<step_id>-check``,
        ``<step_id>`` (the wait) and ``<step_id>-recheck`` after a timeout."""

        async def read() -> dict[str, Any]:
            approval = await self._call(lambda zl: zl.get_approval(approval_id))
            return approval.raw

        before = await ctx.step.run(f"{step_id}-check", read)
        if before.get("status") != "pending":
            return before
        event = await ctx.step.wait_for_event(
            step_id,
            event=DECIDED_EVENT,
            if_exp=f"async.data.approval_id == {_quoted(approval_id)}",
            timeout=timeout,
        )
        if event is not None:
            return dict(event.data)
        return await ctx.step.run(f"{step_id}-recheck", read)


def _quoted(text: str) -> str:
    """A string literal for Inngest's CEL expressions (the id is ``apr_<hex>``;
    quoting still keeps any other text a literal)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def approval_event(event: dict[str, Any], webhook_id: str) -> inngest.Event:
    """The Inngest event for a ZeroLock webhook: ``zerolock/<type>``, the
    webhook's data, and the webhook id as the event id (Inngest's deduplication)."""
    return inngest.Event(name=EVENT_PREFIX + event["type"], data=event["data"], id=webhook_id)


def approval_webhook_bridge(secret: str, client: inngest.Inngest) -> Callable[..., Awaitable[None]]:
    """An ASGI app to subscribe to ZeroLock's approval webhooks (Django admin,
    *Webhook subscriptions*, with this ``whsec_`` secret): verifies each delivery
    and sends it as an event through ``client`` (its event key and event API).
    It answers 2xx only once Inngest took the event, so ZeroLock keeps retrying
    while Inngest is unreachable."""

    async def forward(event: dict[str, Any], webhook_id: str) -> None:
        await client.send(approval_event(event, webhook_id))

    return webhook_receiver(secret, forward)
