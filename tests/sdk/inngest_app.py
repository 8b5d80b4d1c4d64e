"""examples/inngest/app.py's bridge, as tests/sdk/test_inngest.py serves it
(uvicorn, a process of its own). Its Inngest client sends to
``$INNGEST_EVENT_API_BASE_URL``: in the test, a recorder standing in for Inngest's
Event API (no Inngest server can be installed here)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "inngest"))
from app import bridge  # noqa: E402

__all__ = ["bridge"]
