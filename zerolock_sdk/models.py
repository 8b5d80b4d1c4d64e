"""Typed results. Each keeps the server's JSON in ``raw`` for fields added later."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, TypedDict


@dataclass(frozen=True)
class CreateShardOptions:
    type: str = "decision"  # or "additive"
    crdt_type: str | None = None  # map, array or text, for additive shards
    initial_value: Any = None
    reversible: bool = True
    value_schema: dict[str, Any] | None = None
    owner_policy: str = "single-writer"
    owners: list[str] = field(default_factory=list)
    approvals_required: int = 1

    def body(self, shard_id: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": shard_id,
            "type": self.type,
            "initial_value": self.initial_value,
            "reversible": self.reversible,
            "owner_policy": self.owner_policy,
            "owners": list(self.owners),
            "approvals_required": self.approvals_required,
        }
        if self.crdt_type:
            body["crdt_type"] = self.crdt_type
        if self.value_schema is not None:
            body["value_schema"] = self.value_schema
        return body


class CommitOptions(TypedDict, total=False):
    """The keyword options of ``commit`` / ``commit_shard`` (all optional)."""

    read_set: dict[str, int]
    approval_id: str
    fence: int
    idempotency_key: str
    minimal: bool  # the server does not send the value back (result.value is None)


@dataclass(frozen=True)
class Shard:
    id: str
    type: str
    value: Any
    version: int
    crdt_type: str | None = None
    reversible: bool = True
    updated_by: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Shard:
        return cls(
            id=data["id"],
            type=data["type"],
            value=data.get("value"),
            version=data["version"],
            crdt_type=data.get("crdt_type"),
            reversible=data.get("reversible", True),
            updated_by=data.get("updated_by", ""),
            raw=data,
        )


@dataclass(frozen=True)
class CommitResult:
    version: int
    value: Any
    audit_entry_id: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CommitResult:
        return cls(data["version"], data.get("value"), data["audit_entry_id"])


class ApprovalStatus:
    """The statuses an ``Approval`` reports. ``APPROVED`` means approved *and
    applied* (the seed's meaning; the server calls that ``committed``). Any other
    word the server sends is passed through unchanged, so a status this SDK does
    not know can never read as approved."""

    PENDING: Final = "pending"
    APPROVED: Final = "approved"
    REJECTED: Final = "rejected"
    EXPIRED: Final = "expired"
    # Approved by its deciders, but the write could not be applied (the shard moved
    # on after the request). Only reported for servers that say ``approved`` with
    # ``commit.error``; newer servers name this state themselves.
    STALE: Final = "stale"
    # A decider asked for changes: nothing was written; ``message`` says what to
    # change, and a new request may name this one as ``previous_id``.
    CHANGES_REQUESTED: Final = "changes_requested"


class _NoEdit:
    def __repr__(self) -> str:
        return "NO_EDIT"


# ``approve(..., edited_value=...)`` left out: None is a value a decider may approve.
NO_EDIT: Any = _NoEdit()


def _sdk_status(server_status: str, commit: dict[str, Any] | None) -> str:
    if server_status == "committed":
        return ApprovalStatus.APPROVED
    if server_status == "approved" and (commit or {}).get("error"):
        return ApprovalStatus.STALE
    return server_status


@dataclass(frozen=True)
class Approval:
    id: str
    shard_id: str
    # "approved" once approved and applied; ``server_status`` keeps the server's word.
    status: str
    description: str
    requested_by: str
    proposed_value: Any
    expected_version: int
    commit: dict[str, Any] | None = None
    reason: str = ""
    decided_by: str = ""
    stale: bool = False
    # None when the server left the diff out (too large, deep or slow to show);
    # ``diff_omitted`` then says why. An empty list means "no change".
    diff: list[dict[str, Any]] | None = field(default_factory=list)
    diff_omitted: str | None = None
    server_status: str = ""
    # A decider approved ``edited_value`` instead of the proposal (``edited``):
    # that is what was written. ``applied_value`` is the one to read either way.
    edited_value: Any = None
    edited: bool = False
    applied_value: Any = None
    # SHA-256 of applied_value's canonical JSON: approve(..., expected_value_hash=)
    # approves only while the value to apply is still this one.
    applied_value_hash: str = ""
    # Routing (set at request time): the approver group, the group it escalates
    # to, and when it did (None until escalated).
    approver_group: str | None = None
    escalation_group: str | None = None
    escalated_at: str | None = None
    # The earlier request this one follows (see ``ApprovalStatus.CHANGES_REQUESTED``).
    previous_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_decided(self) -> bool:
        return self.status != ApprovalStatus.PENDING

    @property
    def applied(self) -> bool:
        """True once the approved value was written (``commit`` has its version)."""
        return self.server_status == "committed"

    @property
    def rejection_reason(self) -> str | None:
        """The decider's reason when rejected (the seed's name); None otherwise."""
        return self.reason if self.status == ApprovalStatus.REJECTED else None

    @property
    def message(self) -> str | None:
        """What the decider asks the agent to change, when changes were requested."""
        return self.reason if self.status == ApprovalStatus.CHANGES_REQUESTED else None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Approval:
        server_status = data["status"]
        return cls(
            id=data["id"],
            shard_id=data["shard_id"],
            status=_sdk_status(server_status, data.get("commit")),
            description=data.get("description", ""),
            requested_by=data.get("requested_by", ""),
            proposed_value=data.get("proposed_value"),
            expected_version=data.get("expected_version", 0),
            commit=data.get("commit"),
            reason=data.get("reason", ""),
            decided_by=data.get("decided_by", ""),
            stale=data.get("stale", False),
            diff=data.get("diff") if data.get("diff_truncated") else data.get("diff") or [],
            diff_omitted=data.get("diff_omitted"),
            server_status=server_status,
            edited_value=data.get("edited_value"),
            edited=data.get("edited", False),
            # Servers before edits have no applied_value: the proposal is what applied.
            applied_value=data.get("applied_value", data.get("proposed_value")),
            applied_value_hash=data.get("applied_value_hash", ""),
            approver_group=data.get("approver_group"),
            escalation_group=data.get("escalation_group"),
            escalated_at=data.get("escalated_at"),
            previous_id=data.get("previous_id"),
            raw=data,
        )


class Task(str):
    """A task in a queue shard, as ``get_pending_tasks`` returns it: the task id
    itself (a ``str``, so code that treats tasks as ids keeps working) with
    ``.id`` and the task's fields in ``.data``."""

    data: dict[str, Any]

    def __new__(cls, task_id: str, data: dict[str, Any] | None = None) -> Task:
        task = super().__new__(cls, task_id)
        task.data = dict(data or {})
        return task

    @property
    def id(self) -> str:
        return str(self)

    @property
    def status(self) -> str | None:
        return self.data.get("status")

    def __repr__(self) -> str:
        return f"Task({str(self)!r}, {self.data!r})"


@dataclass(frozen=True)
class ClaimResult:
    task_id: str
    claimed: bool
    holder: str | None
    task: dict[str, Any] | None = None
    version: int | None = None  # the queue's version the claim wrote (claim_next)


@dataclass(frozen=True)
class ClaimedTask:
    """The answer of ``POST /api/shards/{id}/claim``. ``value`` (the whole queue)
    is None unless asked for."""

    task_id: str
    task: dict[str, Any]
    version: int
    audit_entry_id: int
    value: Any = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClaimedTask:
        return cls(
            data["task_id"],
            data["task"],
            data["version"],
            data["audit_entry_id"],
            data.get("value"),
        )


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    responses: list[dict[str, Any]]
    versions: dict[str, int]
    revision: int | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TxnResult:
        # No "responses" in a minimal answer (Prefer: return=minimal).
        return cls(
            data["succeeded"], data.get("responses", []), data["versions"], data.get("revision")
        )


@dataclass(frozen=True)
class Lease:
    id: str
    ttl_seconds: int
    expires_at: str
    fence: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Lease:
        return cls(data["lease_id"], data["ttl_seconds"], data["expires_at"], data["fence"])


@dataclass(frozen=True)
class Reservation:
    """A path reservation: globs an agent said it is working on. ``expires_at``
    is None when it lives as long as its lease (``lease_id``); ``key_name`` is the
    name of the key that made it, so a person reading a refusal knows whose it is."""

    id: str
    patterns: list[str]
    exclusive: bool
    holder: str
    key_name: str
    key_prefix: str
    reason: str
    lease_id: str | None
    ttl_seconds: int | None
    expires_at: str | None
    fence: int
    created_at: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reservation:
        key = data.get("key") or {}
        return cls(
            id=data["reservation_id"],
            patterns=list(data["patterns"]),
            exclusive=data["exclusive"],
            holder=data["holder"],
            key_name=key.get("name", ""),
            key_prefix=key.get("prefix", ""),
            reason=data.get("reason", ""),
            lease_id=data.get("lease_id"),
            ttl_seconds=data.get("ttl_seconds"),
            expires_at=data.get("expires_at"),
            fence=data["fence"],
            created_at=data["created_at"],
            raw=data,
        )


@dataclass(frozen=True)
class ReservationConflict:
    """One answer of ``check_reservations``: ``path`` falls in another agent's live
    exclusive ``reservation`` (a path in several is reported once for each)."""

    path: str
    reservation: Reservation

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReservationConflict:
        return cls(data["path"], Reservation.from_json(data["reservation"]))
