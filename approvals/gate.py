"""The approval half of the gate: may this commit carry this approval?

Registered with the shards core in ``ApprovalsConfig.ready()`` (the core does
not import this app): ``shards.rules.gate_check`` calls ``verify`` before
anything is attempted, and the single use is enforced again inside the commit's
transaction (``consume``)."""

from __future__ import annotations

from typing import Any

from audit.chain import value_digest
from common.errors import ApiError, ApprovalInvalid

from .models import Approval, ApprovalStatus

# Approved but not yet applied. A commit carrying an ``approved_stale`` approval
# is still checked against its expected version, so it applies only if the
# shard really is at that version.
APPLICABLE = (ApprovalStatus.APPROVED, ApprovalStatus.APPROVED_STALE)


def invalid(reason: str, message: str, **details: Any) -> ApiError:
    return ApprovalInvalid(reason, message, **details)


def approval_verify(
    *, approval_id: str, shard_id: str, agent_id: str, expected_version: int, new_value: Any
) -> Approval:
    approval = Approval.objects.filter(pk=approval_id).first()
    if approval is None:
        raise invalid("NOT_FOUND", f"No approval {approval_id!r}.")
    if approval.shard_id != shard_id:
        raise invalid("WRONG_SHARD", f"Approval {approval_id} is for shard {approval.shard_id!r}.")
    if approval.requested_by != agent_id:
        raise invalid("WRONG_AGENT", f"Approval {approval_id} was requested by another agent.")
    if approval.expected_version != expected_version:
        raise invalid(
            "WRONG_VERSION",
            f"Approval {approval_id} is for expected_version {approval.expected_version}.",
        )
    # An approval with edits is an approval of the edited value, not the proposal.
    if value_digest(approval.value_to_apply) != value_digest(new_value):
        raise invalid("VALUE_MISMATCH", "new_value differs from the value that was approved.")
    if approval.status == ApprovalStatus.COMMITTED:
        raise invalid("ALREADY_USED", f"Approval {approval_id} has already been used.")
    if approval.status == ApprovalStatus.PENDING and approval.is_expired():
        raise invalid("EXPIRED", f"Approval {approval_id} expired at {approval.expires_at}.")
    if approval.status not in APPLICABLE:
        raise invalid(
            approval.status.upper(), f"Approval {approval_id} is {approval.status}, not approved."
        )
    return approval


def approval_consume(*, approval_id: str, commit: dict[str, Any]) -> None:
    """Marks an approved approval used by a commit; inside that commit's transaction."""
    used = Approval.objects.filter(pk=approval_id, status__in=APPLICABLE).update(
        status=ApprovalStatus.COMMITTED, commit=commit
    )
    if not used:
        raise invalid("ALREADY_USED", f"Approval {approval_id} has already been used.")


class ApprovalGate:
    """What the shards core knows of approvals (``shards.hooks.Gate``)."""

    def verify(
        self,
        *,
        approval_id: str,
        shard_id: str,
        agent_id: str,
        expected_version: int,
        new_value: Any,
    ) -> None:
        approval_verify(
            approval_id=approval_id,
            shard_id=shard_id,
            agent_id=agent_id,
            expected_version=expected_version,
            new_value=new_value,
        )

    def consume(self, *, approval_id: str, commit: dict[str, Any]) -> None:
        approval_consume(approval_id=approval_id, commit=commit)
