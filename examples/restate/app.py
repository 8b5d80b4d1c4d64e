"""Payouts on Restate, written to ZeroLock exactly once (examples/restate/README.md).

Serve the handlers:  hypercorn app:app --bind 127.0.0.1:9080
Serve the bridge:    hypercorn app:bridge --bind 127.0.0.1:9081
(tests/sdk/test_restate.py serves this module against a real restate-server.)"""

from __future__ import annotations

import os
from typing import Any

import restate

from zerolock_sdk.restate import RestateZeroLock, approval_webhook_bridge, approvals

zl = RestateZeroLock(agent_id="payouts")  # $ZEROLOCK_URL, $ZEROLOCK_API_KEY
payouts = restate.Service("payouts")


@payouts.handler()
async def book(ctx: restate.Context, payout: dict[str, Any]) -> dict[str, Any]:
    seen = await zl.read_shard(ctx, payout["shard"])  # journaled: a replay reuses it
    value = {**seen["value"], payout["id"]: payout["amount"]}
    done = await zl.commit_shard(ctx, payout["shard"], value, seen["version"])
    return {"version": done["version"], "invocation": ctx.request().id}


@payouts.handler()
async def claim(ctx: restate.Context, request: dict[str, Any]) -> dict[str, Any]:
    return await zl.claim_task(ctx, request["shard"], request["task"])


@payouts.handler()
async def pay_with_approval(ctx: restate.Context, payout: dict[str, Any]) -> dict[str, Any]:
    seen = await zl.read_shard(ctx, payout["shard"])
    value = {**seen["value"], payout["id"]: payout["amount"]}
    approval = await zl.request_approval(
        ctx, payout["shard"], value, seen["version"], f"Pay {payout['amount']} to {payout['id']}"
    )
    decision = await zl.wait_for_approval(ctx, approval["id"])  # suspended, not polling
    return {"approval_id": approval["id"], "decision": decision}


app = restate.app([payouts, approvals])

# ZeroLock's approval.decided / approval.expired webhooks -> Restate's ingress.
bridge = approval_webhook_bridge(
    os.environ.get("ZEROLOCK_WEBHOOK_SECRET", "whsec_"),
    os.environ.get("RESTATE_INGRESS_URL", "http://127.0.0.1:8080"),
)
