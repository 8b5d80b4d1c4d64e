"""Approval gates: an agent cannot move money on its own. It asks; a human
decides in the console (or, with --auto-approve, a second key decides).

The server refuses self-approval, so --auto-approve needs a second key with
``approval:decide`` in ZEROLOCK_APPROVER_KEY; it is checked before anything is
requested, so a missing or unfit key never leaves a pending request behind."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid

import httpx

from zerolock_sdk import (
    AuthenticationError,
    CreateShardOptions,
    IrreversibleShardError,
    NotFoundError,
    PermissionDeniedError,
    ZeroLockError,
)
from zerolock_sdk.approvals import ApprovalClient
from zerolock_sdk.client import resolve_api_key, resolve_url

URL = resolve_url(None)  # $ZEROLOCK_URL, else http://127.0.0.1:8000
MAKE_APPROVER = (
    "export ZEROLOCK_APPROVER_KEY=$(.venv/bin/python manage.py createapikey approver "
    "--permissions approval:decide | tail -1)"
)


async def approver_problem(approver_key: str) -> str | None:
    """Why this key cannot decide the example's request, or None if it can.
    Probes the decide endpoint with an id that cannot exist: the permission check
    comes first, so a fit key gets 404 and nothing is created or decided."""
    if not approver_key:
        return f"--auto-approve needs a second key to decide; make one: {MAKE_APPROVER}"
    if approver_key == resolve_api_key(None):
        return (
            "ZEROLOCK_APPROVER_KEY is the requesting key, and the server refuses "
            f"self-approval; use a second key: {MAKE_APPROVER}"
        )
    async with ApprovalClient(URL, agent_id="auto-officer", api_key=approver_key) as officer:
        try:
            await officer.approve("apr_preflight_probe", "probe")
        except NotFoundError:
            return None
        except AuthenticationError as error:
            return f"ZEROLOCK_APPROVER_KEY is not a valid key ({error.code}): {MAKE_APPROVER}"
        except PermissionDeniedError as error:
            return f"ZEROLOCK_APPROVER_KEY may not decide approvals ({error.code}): {MAKE_APPROVER}"
    return None


async def main(auto_approve: bool, timeout: float) -> int:
    approver_key = os.environ.get("ZEROLOCK_APPROVER_KEY", "")
    if auto_approve and (problem := await approver_problem(approver_key)):
        print(problem, file=sys.stderr)
        return 2
    shard_id = f"example.treasury.{uuid.uuid4().hex[:6]}"
    async with ApprovalClient(URL, agent_id="executor") as approvals:
        zl = approvals.client
        await zl.create_shard(
            shard_id,
            CreateShardOptions(initial_value={"balance": 1000, "payments": []}, reversible=False),
        )
        shard = await zl.get_shard(shard_id)
        proposed = {"balance": 750, "payments": [{"to": "acme", "amount": 250}]}
        try:
            await zl.commit_shard(shard_id, proposed, shard.version)
        except IrreversibleShardError as refused:
            print(f"direct commit refused: {refused.code}")
        approval = await approvals.request_approval(
            shard_id, proposed, shard.version, "Pay ACME invoice 42", ttl_seconds=600
        )
        print(f"approval {approval.id} is {approval.status}")
        if auto_approve:
            async with ApprovalClient(
                URL, agent_id="auto-officer", api_key=approver_key
            ) as officer:
                await officer.approve(approval.id, "auto-approved by the example")
        else:
            print(f"decide it at {URL}/console/approvals/{approval.id}")
        decided = await approvals.wait_for_approval(
            approval.id, poll_interval_seconds=5, timeout_seconds=timeout
        )
        print(f"decided: {decided.server_status} {decided.commit or ''} {decided.reason}")
        print(f"status: {decided.status}")  # "approved" = approved and applied
        if decided.rejection_reason is not None:
            print(f"rejected because: {decided.rejection_reason}")
        print(f"treasury now: {(await zl.get_shard(shard_id)).value}")
        return 0 if decided.status in ("approved", "rejected") else 1


def run(auto_approve: bool, timeout: float) -> int:
    """One clear line instead of a traceback for what a user can fix."""
    try:
        return asyncio.run(main(auto_approve, timeout))
    except httpx.TransportError as error:
        print(f"cannot reach ZeroLock at {URL} ({error!r}); is `make run` up?", file=sys.stderr)
    except ZeroLockError as error:
        print(f"ZeroLock said {error}", file=sys.stderr)
    except TimeoutError as error:
        print(f"gave up waiting: {error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--auto-approve", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    raise SystemExit(run(args.auto_approve, args.timeout))
