"""The Restate handlers tests/sdk/test_restate.py runs, served by hypercorn in
a process of their own (so the test can kill -9 it), and the approval webhook
bridge (served by a second one).

Settings come from the environment the test gives the processes:
``ZEROLOCK_URL``, ``ZL_TEST_DIR`` (a directory holding ``api-key``, the current
test's key: the test database is flushed between tests, so the key changes
while these processes live), ``ZL_WEBHOOK_SECRET`` and ``ZL_RESTATE_INGRESS``
for the bridge."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import restate

from zerolock_sdk.restate import RestateZeroLock, approval_webhook_bridge, approvals

TEST_DIR = Path(os.environ.get("ZL_TEST_DIR", "."))
# The file whose presence makes the next commit "crash": the process stops
# right after ZeroLock answered, before Restate can journal the step's result.
CRASH_ONCE = TEST_DIR / "crash-after-commit"
CRASHED = TEST_DIR / "commit-applied-then-hung"


class CrashAfterCommit(httpx.AsyncBaseTransport):
    """The real HTTP transport; after a commit's answer arrives, and only while
    CRASH_ONCE exists, it tells the test (CRASHED) and hangs, so the test can
    kill -9 the process at exactly that point."""

    def __init__(self) -> None:
        self._real = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._real.handle_async_request(request)
        if request.url.path.endswith("/commit") and CRASH_ONCE.exists():
            await response.aread()
            CRASH_ONCE.unlink()
            CRASHED.write_text(response.headers.get("idempotency-key", "") or "applied")
            await asyncio.sleep(3600)  # killed here
        return response

    async def aclose(self) -> None:
        await self._real.aclose()


def zerolock() -> RestateZeroLock:
    return RestateZeroLock(
        agent_id="payouts",
        api_key=(TEST_DIR / "api-key").read_text().strip(),
        transport=CrashAfterCommit(),
    )


ledger = restate.Service("ledger")


@ledger.handler()
async def book(ctx: restate.Context, payout: dict[str, Any]) -> dict[str, Any]:
    zl = zerolock()
    seen = await zl.read_shard(ctx, payout["shard"])
    value = {**seen["value"], payout["id"]: payout["amount"]}
    done = await zl.commit_shard(ctx, payout["shard"], value, seen["version"])
    return {"version": done["version"], "invocation": ctx.request().id}


@ledger.handler()
async def claim(ctx: restate.Context, request: dict[str, Any]) -> dict[str, Any]:
    return await zerolock().claim_task(ctx, request["shard"], request["task"])


@ledger.handler()
async def pay_with_approval(ctx: restate.Context, payout: dict[str, Any]) -> dict[str, Any]:
    zl = zerolock()
    seen = await zl.read_shard(ctx, payout["shard"])
    value = {**seen["value"], payout["id"]: payout["amount"]}
    approval = await zl.request_approval(
        ctx, payout["shard"], value, seen["version"], f"Pay {payout['amount']} to {payout['id']}"
    )
    decision = await zl.wait_for_approval(ctx, approval["id"])
    return {"approval_id": approval["id"], "decision": decision}


app = restate.app([ledger, approvals])

bridge = approval_webhook_bridge(
    os.environ.get("ZL_WEBHOOK_SECRET", "whsec_"), os.environ.get("ZL_RESTATE_INGRESS", "")
)
