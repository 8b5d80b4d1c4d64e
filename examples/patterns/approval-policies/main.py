"""Standing approval policies: an officer approves small payments in advance,
for ten minutes, so the agent is not stopped for each one; a large payment
still waits for a person.

Two keys, since a policy never decides requests made through its author's key:
ZEROLOCK_API_KEY (the agent: shard:read, shard:create, approval:request) and
ZEROLOCK_POLICY_KEY (the officer: approval:policy)."""

from __future__ import annotations

import argparse
import os
import sys
import uuid

from zerolock_sdk import CreateShardOptions, SyncZeroLockClient
from zerolock_sdk.client import resolve_api_key, resolve_url

MAKE_OFFICER = (
    "export ZEROLOCK_POLICY_KEY=$(.venv/bin/python manage.py createapikey officer "
    "--permissions approval:policy | tail -1)"
)


def main(payments: int, limit: int) -> int:
    officer_key = os.environ.get("ZEROLOCK_POLICY_KEY", "")
    if not officer_key or officer_key == resolve_api_key(None):
        print(f"needs a second key for the officer: {MAKE_OFFICER}", file=sys.stderr)
        return 2
    url = resolve_url(None)
    shard_id = f"payments:{uuid.uuid4().hex[:8]}"
    with (
        SyncZeroLockClient(url, agent_id="payer") as agent,
        SyncZeroLockClient(url, agent_id="officer", api_key=officer_key) as officer,
    ):
        agent.create_shard(
            shard_id, CreateShardOptions(initial_value={"amount": 0, "to": ""}, reversible=False)
        )
        policy = officer.create_approval_policy(
            shard_prefix=shard_id,
            requested_by="payer",
            when=[{"path": ["amount"], "op": "<=", "value": limit}],
            effect="approve",
            ttl_seconds=600,
            reason=f"payments up to {limit} are routine",
        )
        print(f"policy {policy['id']}: approves payments up to {limit} for 10 minutes")
        applied = 0
        for n in range(payments):
            version = agent.get_shard(shard_id).version
            amount = (n * 7) % limit + 1
            approval = agent.request_approval(
                shard_id, {"amount": amount, "to": f"vendor-{n}"}, version, f"pay {amount}"
            )
            applied += approval.applied and approval.decided_by == f"policy:{policy['id']}"
        print(f"small payments applied by the policy: {applied}/{payments}")

        version = agent.get_shard(shard_id).version
        large = agent.request_approval(
            shard_id, {"amount": limit * 10, "to": "yacht"}, version, "a large one"
        )
        print(f"a payment of {limit * 10}: {large.status} (waits for a person)")
        officer.delete_approval_policy(policy["id"])
        print("policy deleted")
        return 0 if applied == payments and large.status == "pending" else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--payments", type=int, default=10)
    parser.add_argument("--limit", type=int, default=100)
    args = parser.parse_args()
    sys.exit(main(args.payments, args.limit))
