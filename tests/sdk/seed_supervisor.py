"""The supervisor process of the seed's approval sample: runs the document's
``supervisor_review()`` as printed, in its own process with its own key
(``ZEROLOCK_API_KEY`` in this process's environment), so the server sees a
different principal from the requesting executor.

Usage: ``python -m tests.sdk.seed_supervisor GATEWAY MAX_AMOUNT``: the application's
review callback approves a transfer of at most MAX_AMOUNT and rejects larger ones."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from tests.sdk import seed_samples

# Step 4 uses the ApprovalClient that step 3 imports: run as one page, in order.
IMPORTS_SAMPLE, SUPERVISOR_SAMPLE = 10, 11


def review_callback(max_amount: float) -> Any:
    async def human_or_ai_review(approval: Any) -> str:
        amount = approval.proposed_value["transactions"][-1]["amount"]
        return "approve" if amount <= max_amount else "reject"

    return human_or_ai_review


async def main(gateway: str, max_amount: float) -> None:
    namespace = {
        **seed_samples.prelude(),
        "GATEWAY": gateway,
        "human_or_ai_review": review_callback(max_amount),
    }
    for number in (IMPORTS_SAMPLE, SUPERVISOR_SAMPLE):
        await seed_samples.run(seed_samples.source(number), namespace, f"<seed sample {number}>")
    await namespace["supervisor_review"]()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
