"""ZeroLock's Python SDK: a stateless client; the server decides everything."""

from .cache import CachedZeroLockClient
from .client import ZeroLockClient
from .errors import (
    ApprovalInvalidError,
    AuthenticationError,
    ConflictError,
    FencedError,
    IrreversibleShardError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ReadSetStaleError,
    SchemaViolationError,
    SelfApprovalError,
    StaleCommitError,
    ValidationError,
    ZeroLockError,
)
from .models import Approval, CommitResult, CreateShardOptions, Lease, Shard, TxnResult
from .sync import SyncZeroLockClient

__all__ = [
    "Approval",
    "ApprovalInvalidError",
    "AuthenticationError",
    "CachedZeroLockClient",
    "CommitResult",
    "ConflictError",
    "CreateShardOptions",
    "FencedError",
    "IrreversibleShardError",
    "Lease",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitedError",
    "ReadSetStaleError",
    "SchemaViolationError",
    "SelfApprovalError",
    "Shard",
    "StaleCommitError",
    "SyncZeroLockClient",
    "TxnResult",
    "ValidationError",
    "ZeroLockClient",
    "ZeroLockError",
]
