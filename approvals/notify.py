"""Pushes about approvals: ``approval_decided`` to the requesting agent's sockets
on /ws/agents/, and every change to the console's /ws/live/ pages."""

from __future__ import annotations

from realtime import push

from .models import Approval


def approval_changed(approval: Approval, event: str) -> None:
    """``event``: "requested", "approved_partly" (quorum not reached yet) or "decided"."""
    if event == "decided":
        push.agent_send(
            approval.requested_key_prefix,
            approval.requested_by,
            {
                "type": "approval_decided",
                "approval_id": approval.id,
                "shard_id": approval.shard_id,
                "status": approval.status,
                "commit": approval.commit,
                "reason": approval.reason,
                "decided_by": approval.decided_by,
            },
        )
    push.live_send(
        {
            "type": "approval",
            "event": event,
            "approval_id": approval.id,
            "shard_id": approval.shard_id,
            "status": approval.status,
        }
    )
