"""The option and result types, under the module name the reference documents
use (``from zerolock_sdk.types import CreateShardOptions``). They are defined in
``zerolock_sdk.models``; both imports give the same classes."""

from .models import (
    Approval,
    ApprovalStatus,
    ClaimedTask,
    ClaimResult,
    CommitOptions,
    CommitResult,
    CreateShardOptions,
    Lease,
    Reservation,
    ReservationConflict,
    Shard,
    Task,
    TxnResult,
)

__all__ = [
    "Approval",
    "ApprovalStatus",
    "ClaimedTask",
    "ClaimResult",
    "CommitOptions",
    "CommitResult",
    "CreateShardOptions",
    "Lease",
    "Reservation",
    "ReservationConflict",
    "Shard",
    "Task",
    "TxnResult",
]
