"""examples/restate/app.py as tests/sdk/test_restate.py serves it (hypercorn,
a process of its own, so the test can kill -9 it): the example's handlers with
its ``zl`` swapped for one that reads the current test's key from
``$ZL_TEST_DIR/api-key`` (the test database is flushed between tests, so the key
changes while this process lives) and can stop right after a commit."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import httpx
import restate

from zerolock_sdk.client import ZeroLockClient
from zerolock_sdk.restate import RestateZeroLock, wait_for_approval

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "restate"))
import app as example  # noqa: E402

T = TypeVar("T")
TEST_DIR = Path(os.environ.get("ZL_TEST_DIR", "."))
# While this file exists, the next commit "crashes": the process hangs right after
# ZeroLock answered, before Restate can journal the step's result, and the test
# kills it (CRASHED tells the test it is there).
CRASH_ONCE = TEST_DIR / "crash-after-commit"
CRASHED = TEST_DIR / "commit-applied-then-hung"


class CrashAfterCommit(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self._real = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._real.handle_async_request(request)
        if request.url.path.endswith("/commit") and CRASH_ONCE.exists():
            await response.aread()
            CRASH_ONCE.unlink()
            CRASHED.write_text("applied")
            await asyncio.sleep(3600)  # killed here
        return response

    async def aclose(self) -> None:
        await self._real.aclose()


class TestZeroLock(RestateZeroLock):
    async def _call(self, work: Callable[[ZeroLockClient], Awaitable[T]]) -> T:
        self._options["api_key"] = (TEST_DIR / "api-key").read_text().strip()
        self._options["transport"] = CrashAfterCommit()
        return await super()._call(work)


example.zl = TestZeroLock(agent_id="payouts")

# A wait on an approval requested elsewhere (the test decides it before waiting).
waits = restate.Service("approval_waits")


@waits.handler()
async def wait(ctx: restate.Context, approval_id: str) -> dict:
    return await wait_for_approval(ctx, approval_id)


app = restate.app([example.payouts, example.approvals, waits])
bridge = example.bridge
