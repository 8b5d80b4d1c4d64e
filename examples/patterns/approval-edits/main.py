"""Decisions beyond yes or no: an officer asks the agent for changes, the agent
asks again (naming the request it follows), and the officer approves with an
edit. The agent reads what was written from ``applied_value``.

With --auto-decide a second key (ZEROLOCK_APPROVER_KEY, ``approval:decide``)
plays the officer; without it, decide in the console (the page has "Request
changes…" and "Approve with edits…")."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from typing import Any

import httpx

from zerolock_sdk import ApprovalStatus, CreateShardOptions, ZeroLockError
from zerolock_sdk.approvals import ApprovalClient
from zerolock_sdk.client import resolve_url

URL = resolve_url(None)  # $ZEROLOCK_URL, else http://127.0.0.1:8000
LIMIT = 500


async def officer_decides(approver_key: str, approval_id: str, amount: int) -> None:
    """The scripted officer: over the limit, ask for changes; else approve, a little less."""
    async with ApprovalClient(URL, agent_id="auto-officer", api_key=approver_key) as officer:
        if amount > LIMIT:
            await officer.request_changes(approval_id, f"At most {LIMIT}, please")
        else:
            await officer.approve(
                approval_id, "paid net of the fee", edited_value=payment(amount - 50)
            )


def payment(amount: int) -> dict[str, Any]:
    return {"to": "acme", "amount": amount}


async def main(auto_decide: bool, timeout: float) -> int:
    approver_key = os.environ.get("ZEROLOCK_APPROVER_KEY", "")
    if auto_decide and not approver_key:
        print("--auto-decide needs ZEROLOCK_APPROVER_KEY (approval:decide)", file=sys.stderr)
        return 2
    shard_id = f"example.payout.{uuid.uuid4().hex[:6]}"
    async with ApprovalClient(URL, agent_id="executor") as approvals:
        zl = approvals.client
        await zl.create_shard(
            shard_id, CreateShardOptions(initial_value=payment(0), reversible=False)
        )
        version = (await zl.get_shard(shard_id)).version
        amount, previous_id = 900, None
        for _ in range(3):
            asked = await approvals.request_approval(
                shard_id, payment(amount), version, f"Pay ACME {amount}", previous_id=previous_id
            )
            print(f"asked {asked.id} for {amount} (follows {asked.previous_id})")
            if auto_decide:
                await officer_decides(approver_key, asked.id, amount)
            else:
                print(f"decide it at {URL}/console/approvals/{asked.id}")
            outcome = await approvals.wait_for_approval(asked.id, timeout_seconds=timeout)
            if outcome.status == ApprovalStatus.CHANGES_REQUESTED:
                print(f"changes requested: {outcome.message}")
                amount, previous_id = LIMIT, asked.id  # the agent's revision
                continue
            print(f"decided: {outcome.status}, edited: {outcome.edited}")
            print(f"applied value: {outcome.applied_value}")
            print(f"shard now: {(await zl.get_shard(shard_id)).value}")
            return 0 if outcome.applied else 1
    return 1


def run(auto_decide: bool, timeout: float) -> int:
    try:
        return asyncio.run(main(auto_decide, timeout))
    except httpx.TransportError as error:
        print(f"cannot reach ZeroLock at {URL} ({error!r}); is `make run` up?", file=sys.stderr)
    except ZeroLockError as error:
        print(f"ZeroLock said {error}", file=sys.stderr)
    except TimeoutError as error:
        print(f"gave up waiting: {error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--auto-decide", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    raise SystemExit(run(args.auto_decide, args.timeout))
