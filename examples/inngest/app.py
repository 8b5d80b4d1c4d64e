"""Payouts as Inngest functions, written to ZeroLock exactly once
(examples/inngest/README.md). Serve ``functions`` with any of the Inngest SDK's
framework integrations, and ``bridge`` (an ASGI app) where ZeroLock's approval
webhooks can reach it. ``python app.py`` runs ``book_payout`` once in the
Inngest SDK's own simulator (no Inngest server) against $ZEROLOCK_URL.
(tests/sdk/test_inngest.py runs these functions and this bridge.)"""

from __future__ import annotations

import datetime
import os
from typing import Any

import inngest

from zerolock_sdk.inngest import InngestZeroLock, approval_webhook_bridge

client = inngest.Inngest(app_id="payouts")  # $INNGEST_EVENT_KEY, $INNGEST_DEV, ...
zl = InngestZeroLock(agent_id="payouts")  # $ZEROLOCK_URL, $ZEROLOCK_API_KEY


@client.create_function(fn_id="book-payout", trigger=inngest.TriggerEvent(event="payout/created"))
async def book_payout(ctx: inngest.Context) -> dict[str, Any]:
    payout = ctx.event.data
    seen = await zl.read_shard(ctx, "read-ledger", payout["shard"])  # memoized
    value = {**seen["value"], payout["id"]: payout["amount"]}
    done = await zl.commit_shard(ctx, "commit-ledger", payout["shard"], value, seen["version"])
    return {"version": done["version"]}


@client.create_function(fn_id="pay-approved", trigger=inngest.TriggerEvent(event="payout/large"))
async def pay_approved(ctx: inngest.Context) -> dict[str, Any]:
    payout = ctx.event.data
    seen = await zl.read_shard(ctx, "read-ledger", payout["shard"])
    value = {**seen["value"], payout["id"]: payout["amount"]}
    approval = await zl.request_approval(
        ctx, "ask", payout["shard"], value, seen["version"], f"Pay {payout['amount']}"
    )
    return await zl.wait_for_approval(
        ctx, "wait-approval", approval["id"], timeout=datetime.timedelta(hours=4)
    )


functions = [book_payout, pay_approved]

# ZeroLock's approval webhooks -> Inngest events "zerolock/approval.decided".
bridge = approval_webhook_bridge(os.environ.get("ZEROLOCK_WEBHOOK_SECRET", "whsec_"), client)


if __name__ == "__main__":
    import asyncio
    import uuid

    from inngest.experimental import mocked

    from zerolock_sdk import CreateShardOptions, ZeroLockClient

    async def make_ledger() -> str:
        async with ZeroLockClient(agent_id="setup") as setup:
            shard = await setup.create_shard(
                f"ledger.{uuid.uuid4().hex[:8]}", CreateShardOptions(initial_value={})
            )
            return shard.id

    ledger = asyncio.run(make_ledger())
    event = inngest.Event(name="payout/created", data={"shard": ledger, "id": "p1", "amount": 5})
    result = mocked.trigger(book_payout, event, mocked.Inngest(app_id="payouts"))
    print(f"{ledger}: {result.status.value}, {result.output}")
