"""Restate on ZeroLock (``pip install zerolock[restate]``).

Restate journals each ``ctx.run`` step's result and, when a handler's process
dies or its connection drops, replays the invocation: journaled steps return
their recorded result, and the first unjournaled step runs again. A ZeroLock
write in a step that ran but whose result never reached the journal would be
applied twice; so every write these helpers make carries an ``Idempotency-Key``
made of the invocation id and the step's position and name, the same on every
replay (``zerolock_sdk.idempotency``), and the server answers the replay with
the first attempt's stored answer.

    zl = RestateZeroLock(agent_id="payouts")            # $ZEROLOCK_URL, $ZEROLOCK_API_KEY

    @payouts.handler()
    async def book(ctx: restate.Context, payout: dict) -> int:
        seen = await zl.read_shard(ctx, "ledger")                # journaled
        value = {**seen["value"], payout["id"]: payout["amount"]}
        done = await zl.commit_shard(ctx, "ledger", value, seen["version"])
        return done["version"]

A refusal that a retry cannot change (``STALE_VERSION``, a permission, a schema)
becomes a ``restate.TerminalError`` carrying the error code, so the handler can
read again and decide; transport errors, 429 and 5xx are left to Restate's retries.

Approvals: ``wait_for_approval`` suspends the invocation on a Restate awakeable
(no process waits, no polling) until ZeroLock's ``approval.decided`` (or
``approval.expired``) webhook arrives. The webhook goes to
``approval_webhook_bridge``, which checks its signature and forwards it to the
``ZeroLockApprovals`` virtual object through Restate's ingress; that object,
keyed by the approval id, resolves every awakeable waiting on it, and keeps the
decision for waits that register later (the webhook may win the race). Bind
``approvals`` next to your services: ``restate.app([payouts, approvals])``."""

from __future__ import annotations

import json
import weakref
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx
import restate

from .errors import ZeroLockError
from .idempotency import StepCalls, step_idempotency_key
from .task_claim import claim_task
from .webhooks import webhook_receiver

APPROVALS_OBJECT = "ZeroLockApprovals"
DECIDING_EVENTS = frozenset({"approval.decided", "approval.expired"})

# Steps counted per handler attempt: a replay runs the handler's code again from
# the top in the same order, so the n-th helper call gets the same n each time.
_steps: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def step_key(ctx: restate.Context | restate.ObjectContext, name: str) -> str:
    """The Idempotency-Key of the next step of this invocation: its id, the
    step's position in the handler and its name (two steps with one name still
    get two keys; every replay of one step gets the same)."""
    number = _steps.get(ctx, 0) + 1
    _steps[ctx] = number
    return step_idempotency_key("restate", ctx.request().id, str(number), name)


class RestateZeroLock(StepCalls):
    """Journaled ZeroLock steps for Restate handlers. URL and key default to
    ``$ZEROLOCK_URL`` and ``$ZEROLOCK_API_KEY``; ``client_options`` go to each
    step's ``ZeroLockClient``."""

    default_agent_id = "restate"

    def terminal(self, error: ZeroLockError) -> Exception:
        return restate.TerminalError(
            f"{error.code}: {error.message}",
            status_code=error.status,
            metadata={"code": error.code},
        )

    async def read_shard(
        self, ctx: restate.Context | restate.ObjectContext, shard_id: str, *, step: str = ""
    ) -> dict[str, Any]:
        """The shard as read once: a replay gets the journaled read, so a write
        computed from it sends the same body on every attempt."""
        name = step or f"zerolock read {shard_id}"
        step_key(ctx, name)  # reads need no key, but they count as steps

        async def read() -> dict[str, Any]:
            shard = await self._call(lambda zl: zl.get_shard(shard_id))
            return {"shard_id": shard.id, "version": shard.version, "value": shard.value}

        return await ctx.run_typed(name, read)

    async def commit_shard(
        self,
        ctx: restate.Context | restate.ObjectContext,
        shard_id: str,
        new_value: Any,
        expected_version: int,
        *,
        step: str = "",
    ) -> dict[str, Any]:
        name = step or f"zerolock commit {shard_id}"
        key = step_key(ctx, name)

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

        return await ctx.run_typed(name, commit)

    async def claim_task(
        self,
        ctx: restate.Context | restate.ObjectContext,
        shard_id: str,
        task_id: str,
        *,
        step: str = "",
    ) -> dict[str, Any]:
        name = step or f"zerolock claim {shard_id}/{task_id}"
        key = step_key(ctx, name)

        async def claim() -> dict[str, Any]:
            result = await self._call(
                lambda zl: claim_task(zl, shard_id, task_id, idempotency_key=key)
            )
            return {"task_id": result.task_id, "claimed": result.claimed, "holder": result.holder}

        return await ctx.run_typed(name, claim)

    async def request_approval(
        self,
        ctx: restate.Context | restate.ObjectContext,
        shard_id: str,
        proposed_value: Any,
        expected_version: int,
        description: str,
        *,
        ttl_seconds: int = 3600,
        step: str = "",
    ) -> dict[str, Any]:
        """Asks once (journaled): a replay gets the same approval, not a second one."""
        name = step or f"zerolock request approval {shard_id}"
        key = step_key(ctx, name)

        async def ask() -> dict[str, Any]:
            return await self.approval_asked(
                key, shard_id, proposed_value, expected_version, description, ttl_seconds
            )

        return await ctx.run_typed(name, ask)

    async def wait_for_approval(
        self, ctx: restate.Context | restate.ObjectContext, approval_id: str
    ) -> dict[str, Any]:
        return await wait_for_approval(ctx, approval_id)


async def wait_for_approval(
    ctx: restate.Context | restate.ObjectContext, approval_id: str
) -> dict[str, Any]:
    """Suspends until ZeroLock decides the approval (or it expires); returns the
    webhook's ``data``: ``status`` is "committed" (approved and applied;
    ``commit`` has the version), "rejected" (``reason``), "approved_stale" or
    "expired". Needs ``approvals`` bound and ``approval_webhook_bridge`` receiving
    the ``approval.decided`` and ``approval.expired`` webhooks."""
    awakeable_id, decided = ctx.awakeable(type_hint=dict)
    ctx.object_send(await_decision, key=approval_id, arg=awakeable_id)
    return await decided


approvals = restate.VirtualObject(APPROVALS_OBJECT)


@approvals.handler()
async def await_decision(ctx: restate.ObjectContext, awakeable_id: str) -> None:
    """A wait registers here; one decided already resolves it at once."""
    decision = await ctx.get("decision", type_hint=dict)
    if decision is not None:
        ctx.resolve_awakeable(awakeable_id, decision)
        return
    waiting = await ctx.get("waiting", type_hint=list) or []
    ctx.set("waiting", [*waiting, awakeable_id])


@approvals.handler()
async def decided(ctx: restate.ObjectContext, event: dict[str, Any]) -> None:
    """The bridge delivers the webhook's event here (once per webhook id)."""
    if event.get("type") not in DECIDING_EVENTS:
        return
    if await ctx.get("decision", type_hint=dict) is not None:
        return  # decided once; a later event (an expiry after approval) changes nothing
    data = event["data"]
    ctx.set("decision", data)
    for awakeable_id in await ctx.get("waiting", type_hint=list) or []:
        ctx.resolve_awakeable(awakeable_id, data)
    ctx.clear("waiting")


def approval_webhook_bridge(
    secret: str, ingress_url: str, *, headers: dict[str, str] | None = None
) -> Callable[..., Awaitable[None]]:
    """An ASGI app to subscribe to ``approval.decided`` and ``approval.expired``
    (Django admin, *Webhook subscriptions*, with this ``whsec_`` secret). It
    verifies each delivery and sends it to ``ZeroLockApprovals/<approval id>/decided``
    on Restate's ingress with the webhook id as the idempotency key: ZeroLock's
    retries of one delivery reach the object once. It answers 2xx only when
    Restate accepted the message, so ZeroLock keeps retrying while Restate is down.
    ``headers`` are added to the ingress request (e.g. an authorization)."""
    base = ingress_url.rstrip("/")

    async def forward(event: dict[str, Any], webhook_id: str) -> None:
        if event.get("type") not in DECIDING_EVENTS:
            return
        approval_id = quote(str(event["data"]["approval_id"]), safe="")
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.post(
                f"{base}/{APPROVALS_OBJECT}/{approval_id}/decided/send",
                content=json.dumps(event),
                headers={
                    "content-type": "application/json",
                    "idempotency-key": webhook_id,
                    **(headers or {}),
                },
            )
            response.raise_for_status()

    return webhook_receiver(secret, forward)
