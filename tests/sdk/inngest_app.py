"""The Inngest approval bridge that tests/sdk/test_inngest.py serves with
uvicorn in its own process. It sends events to ``ZL_INNGEST_EVENT_API``, which in
the test is a recorder standing in for Inngest's Event API (no Inngest server
can be installed here)."""

from __future__ import annotations

import os

import inngest

from zerolock_sdk.inngest import approval_webhook_bridge

client = inngest.Inngest(
    app_id="zerolock-test",
    event_api_base_url=os.environ.get("ZL_INNGEST_EVENT_API", "http://127.0.0.1:9"),
    event_key="test-event-key",
    is_production=False,
)

bridge = approval_webhook_bridge(os.environ.get("ZL_WEBHOOK_SECRET", "whsec_"), client)
