"""Approval gates: an agent cannot move money on its own. It asks; a human
decides in the console (or, with --auto-approve, a second key decides)."""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid

from zerolock_sdk import CreateShardOptions, IrreversibleShardError
from zerolock_sdk.approvals import ApprovalClient

URL = os.environ.get("ZEROLOCK_URL", "http://127.0.0.1:8000")
KEY = os.environ.get("ZEROLOCK_API_KEY", "")
APPROVER_KEY = os.environ.get("ZEROLOCK_APPROVER_KEY", KEY)


async def main(auto_approve: bool, timeout: float) -> int:
    shard_id = f"example.treasury.{uuid.uuid4().hex[:6]}"
    async with ApprovalClient(URL, agent_id="executor", api_key=KEY) as approvals:
        zl = approvals.client
        await zl.create_shard(
            shard_id,
            CreateShardOptions(initial_value={"balance": 1000, "payments": []}, reversible=False),
        )
        shard = await zl.get_shard(shard_id)
        proposed = {"balance": 750, "payments": [{"to": "acme", "amount": 250}]}
        try:
            await zl.commit(shard_id, shard.version, proposed)
        except IrreversibleShardError as refused:
            print(f"direct commit refused: {refused.code}")
        approval = await approvals.request_approval(
            shard_id, proposed, shard.version, "Pay ACME invoice 42", ttl_seconds=600
        )
        print(f"approval {approval.id} is {approval.status}")
        if auto_approve:
            async with ApprovalClient(
                URL, agent_id="auto-officer", api_key=APPROVER_KEY
            ) as officer:
                await officer.approve(approval.id, "auto-approved by the example")
        else:
            print(f"decide it at {URL}/console/approvals/{approval.id}")
        decided = await approvals.wait_for_approval(approval.id, timeout_seconds=timeout)
        print(f"decided: {decided.status} {decided.commit or ''} {decided.reason}")
        value = (await zl.get_shard(shard_id)).value
        print(f"treasury now: {value}")
        return 0 if decided.status in ("committed", "rejected") else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--auto-approve", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.auto_approve, args.timeout)))
