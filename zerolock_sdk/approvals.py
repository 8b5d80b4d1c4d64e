"""Approval gates from the agent's side: ask, wait for a human, or decide."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import websockets

from .client import ZeroLockClient
from .models import NO_EDIT, Approval


class ApprovalClient:
    """``async with ApprovalClient(url, agent_id="executor") as approvals: ...``
    ``approvals.client`` is the underlying ZeroLockClient (URL and key default to
    ``$ZEROLOCK_URL`` and ``$ZEROLOCK_API_KEY`` as there)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        agent_id: str,
        api_key: str | None = None,
        **options: Any,
    ) -> None:
        self.client = ZeroLockClient(base_url, agent_id=agent_id, api_key=api_key, **options)

    async def __aenter__(self) -> ApprovalClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.close()

    async def request_approval(
        self,
        shard_id: str,
        proposed_value: Any,
        expected_version: int,
        description: str,
        *,
        ttl_seconds: int = 3600,
        previous_id: str | None = None,
    ) -> Approval:
        return await self.client.request_approval(
            shard_id,
            proposed_value,
            expected_version,
            description,
            ttl_seconds=ttl_seconds,
            previous_id=previous_id,
        )

    async def wait_for_approval(
        self,
        approval_id: str,
        *,
        poll_interval_seconds: float | None = None,
        timeout_seconds: float = 3600,
        poll_seconds: float | None = None,
    ) -> Approval:
        """Until the approval is decided: ``status`` is then "approved" (and
        applied: ``commit`` has the version; ``applied_value`` is what was written,
        the decider's ``edited_value`` when ``edited``), "rejected"
        (``rejection_reason``), "changes_requested" (``message``: ask again with
        ``previous_id``), "expired", or whatever else the server says. The ``approval_decided`` push
        ends the wait at once; polling every ``poll_interval_seconds`` (the seed's
        name; ``poll_seconds`` is the same) is the fallback. Raises
        ``TimeoutError`` if it is still pending after ``timeout_seconds``."""
        if poll_interval_seconds is not None and poll_seconds is not None:
            raise TypeError("pass poll_interval_seconds or poll_seconds, not both")
        interval = next((p for p in (poll_interval_seconds, poll_seconds) if p is not None), 5.0)
        deadline = time.monotonic() + timeout_seconds
        headers = self.client.ws_headers()
        socket = None
        with contextlib.suppress(OSError, websockets.InvalidHandshake, asyncio.TimeoutError):
            socket = await asyncio.wait_for(
                websockets.connect(self.client.ws_url, additional_headers=headers), timeout=5
            )
        try:
            while True:
                approval = await self.client.get_approval(approval_id)
                if approval.is_decided:
                    return approval
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"approval {approval_id} is still pending")
                await self._next_push(socket, approval_id, min(interval, left))
        finally:
            if socket is not None:
                await socket.close()

    @staticmethod
    async def _next_push(socket: Any, approval_id: str, wait: float) -> None:
        if socket is None:
            await asyncio.sleep(wait)
            return
        end = time.monotonic() + wait
        with contextlib.suppress(asyncio.TimeoutError, websockets.ConnectionClosed):
            while (left := end - time.monotonic()) > 0:
                event = json.loads(await asyncio.wait_for(socket.recv(), timeout=left))
                if (
                    event.get("type") == "approval_decided"
                    and event.get("approval_id") == approval_id
                ):
                    return

    async def list_pending_approvals(self, **filters: Any) -> list[Approval]:
        return await self.client.list_approvals(status="pending", **filters)

    async def approve(
        self,
        approval_id: str,
        reason: str = "",
        *,
        edited_value: Any = NO_EDIT,
        expected_value_hash: str | None = None,
    ) -> Approval:
        return await self.client.approve(
            approval_id,
            reason,
            edited_value=edited_value,
            expected_value_hash=expected_value_hash,
        )

    async def request_changes(self, approval_id: str, message: str) -> Approval:
        return await self.client.request_changes(approval_id, message)

    async def reject(self, approval_id: str, reason: str) -> Approval:
        return await self.client.reject(approval_id, reason)
