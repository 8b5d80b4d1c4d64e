"""The rules of a write: each one a function, and all of them applied by the
version writer itself (``writer.version_write``) to every write that makes a
new version, unless the write names an exemption.

- owners (``owner_check``): an owners-only shard takes writes from its owners;
- the gate (``gate_check``): an irreversible shard takes a commit only with a
  matching, approved, unused approval;
- the schema (``schema_rule``): the value satisfies the shard's value_schema;
- the read set (``read_set_stale_entries``): the shards a decision was based on
  have not moved;
- the fence (``fence_check``): no write from a lease holder older than the
  newest the shard has seen.

A caller may run the cheap ones before it queues for the write lock
(``rules_check``, the same functions), so that a refusal costs no lock turn;
the writer runs them again under the lock, where they decide. What differs
between callers is said once, in ``WriteRules``: the approval a commit
carries, its read set and fence, what was already validated, and its
exemptions by name (``Exemption``), each documented in docs/decisions.md."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from access.identity import Actor
from audit.chain import audited_transaction
from audit.rejections import rejection_entry
from common.applied import applied_marking
from common.errors import ApiError, ApprovalInvalid, ErrorCode, Invalid, StaleVersion
from common.events import send_event_on_commit
from common.inputs import INT64_MAX, is_json_integer

from .hooks import hooks
from .models import OwnerPolicy, Shard
from .schema_additive import merged_validate
from .value_schema import value_validate


class Exemption(enum.Enum):
    """A rule a kind of write is exempt from, by name: nothing is skipped silently."""

    # A lease's end removes what the lease wrote (a holder's path) for a holder
    # that is gone: it is no agent's commit, so neither the owners nor the gate
    # (which guard agents' decisions) apply, and the schema does not either: a
    # dead holder's task must come free even when the schema wanted a holder.
    LEASE_END = "lease_end"
    # An approved commit is the gate's own decision being applied: the approval
    # was verified and is consumed by the approvals app (approvals.services).
    APPROVED = "approved"


_SKIPS: dict[Exemption, frozenset[str]] = {
    Exemption.LEASE_END: frozenset({"owners", "gate", "schema"}),
    Exemption.APPROVED: frozenset({"gate"}),
}


@dataclass(frozen=True)
class Checked:
    """Proof that this very value passed this schema before the lock: the
    writer then does not run the schema again under it."""

    value: Any
    schema: Any

    def covers(self, value: Any, schema: Any) -> bool:
        return self.value is value and self.schema == schema


@dataclass(frozen=True)
class Additions:
    """An additive write whose additions were checked before the lock
    (``schema_additive.additions_validate``): under it, the merged value's
    whole-value keywords only."""

    checked: bool
    crdt_type: str


@dataclass(frozen=True)
class WriteRules:
    """What one version write must satisfy beyond the shard's own rules."""

    approval_id: str | None = None
    read_set: Mapping[str, int] | None = None
    fence: int | None = None
    # What the schema rule has already seen (None: it runs on the value now).
    schema: Checked | Additions | None = None
    exemption: Exemption | None = None
    # The version a write not checked against one is recorded against (additive,
    # claims): for the gate, which verifies approvals of decision commits only.
    versioned: bool = True
    details: dict[str, Any] = field(default_factory=dict)

    def applies(self, rule: str) -> bool:
        return self.exemption is None or rule not in _SKIPS[self.exemption]


class Refusal(ApiError):
    """A write refused under the lock, carrying the audit record that states it:
    the group commit rolls the write back to its savepoint and appends the
    record in the batch, so the refusal is on the chain like a commit."""

    def __init__(self, error: ApiError, record: dict[str, Any]) -> None:
        super().__init__(error.code, error.message, **error.details)
        self.record = record


def refused(error: ApiError, *, actor: Actor, shard_id: str, expected: object) -> Refusal:
    return Refusal(
        error,
        rejection_entry(
            agent_id=actor.agent_id,
            key_prefix=actor.key_prefix,
            shard_id=shard_id,
            expected=expected,
            code=error.code,
        ),
    )


# --- the rules ------------------------------------------------------------------


def owner_check(shard: Shard, agent_id: str) -> None:
    if shard.owner_policy == OwnerPolicy.OWNERS_ONLY and agent_id not in shard.owners:
        raise ApiError(
            ErrorCode.NOT_AN_OWNER,
            f"Only the owners of {shard.id!r} may commit.",
            owners=shard.owners,
        )


def gate_check(
    shard: Shard,
    approval_id: str | None,
    *,
    agent_id: str = "",
    expected_version: int | None = None,
    new_value: Any = None,
) -> None:
    """Irreversible shards take a commit only with a matching, approved, unused
    approval (its single use is spent by the writer, in the commit's
    transaction). With no gate registered, an irreversible shard takes no
    commit at all (fail closed)."""
    if approval_id:
        if expected_version is None:
            raise ApprovalInvalid("NOT_APPLICABLE", "Approvals apply to decision shards only.")
        if hooks.gate is None:
            raise ApprovalInvalid("NO_GATE", "No approval gate is installed on this server.")
        hooks.gate.verify(
            approval_id=approval_id,
            shard_id=shard.id,
            agent_id=agent_id,
            expected_version=expected_version,
            new_value=new_value,
        )
        return
    if not shard.reversible:
        raise ApiError(
            ErrorCode.APPROVAL_REQUIRED,
            f"Shard {shard.id!r} is irreversible: request an approval first "
            "(POST /api/approvals/request).",
            shard_id=shard.id,
        )


def schema_rule(shard: Shard, value: Any, proof: Checked | Additions | None) -> None:
    """The value satisfies the shard's schema: checked now, unless ``proof`` says
    it was (this value, this schema), or only its whole-value part is left."""
    if isinstance(proof, Additions):
        merged_validate(shard.value_schema, proof.crdt_type, value, additions_checked=proof.checked)
    elif proof is None or not proof.covers(value, shard.value_schema):
        value_validate(shard.value_schema, value)


def schema_checked(shard: Shard, value: Any) -> Checked:
    """Validates before the lock, and says so to the writer."""
    value_validate(shard.value_schema, value)
    return Checked(value, shard.value_schema)


def read_set_stale_entries(read_set: Mapping[str, int]) -> list[dict[str, Any]]:
    if not read_set:
        return []
    current = dict(Shard.objects.filter(id__in=list(read_set)).values_list("id", "version"))
    return [
        {"shard_id": sid, "read_version": read, "current_version": current.get(sid)}
        for sid, read in sorted(read_set.items())
        if current.get(sid) != read
    ]


def read_set_check(read_set: Mapping[str, int] | None) -> None:
    stale = read_set_stale_entries(read_set or {})
    if stale:
        raise ApiError(
            ErrorCode.READ_SET_STALE,
            "Shards this decision was based on have moved on.",
            stale=stale,
        )


# A lease fence is a positive 64-bit integer: a grant's audit revision. One rule
# for the hand-parsed bodies (fence_parse) and the serializer ones (FenceField).
FENCE_MIN, FENCE_MAX = 1, INT64_MAX


def fence_parse(raw: Any) -> int | None:
    """An optional lease fence in a hand-parsed request body (transactions,
    additive operations); ``shards.serializers.FenceField`` in a serializer."""
    if raw is None:
        return None
    if not is_json_integer(raw) or not FENCE_MIN <= raw <= FENCE_MAX:
        raise Invalid(
            "fence must be a positive integer.",
            fields={"fence": ["invalid"]},
        )
    return raw


def fence_check(*, shard_ids: set[str], fence: int | None) -> None:
    """The fencing rule: a write carrying an older fence than the newest one the
    shard has seen is refused; a newer one becomes the shard's fence."""
    if fence is None:
        return
    for shard_id in sorted(shard_ids):
        seen = Shard.objects.filter(pk=shard_id).values_list("fence", flat=True).first()
        if seen is not None and fence < seen:
            raise ApiError(
                ErrorCode.FENCED,
                f"Fence {fence} is older than {seen}, the newest holder's on {shard_id!r}.",
                shard_id=shard_id,
                fence=fence,
                current_fence=seen,
            )
    Shard.objects.filter(pk__in=shard_ids, fence__lt=fence).update(fence=fence)


def stale_error(actor: Actor, expected_version: int, current: Mapping[str, Any]) -> ApiError:
    """The OCC refusal: 409 STALE_VERSION with the winner (its value only to a key
    that may read it: ``Actor.sees_values``)."""
    values = {"current_value": current["value"]} if actor.sees_values else {}
    return StaleVersion(expected_version, current["version"], **values)


def conflict_told(actor: Actor, shard_id: str, current: Mapping[str, Any], rejected: Any) -> None:
    """The loser of a race hears what won and how its value differs (Layer 3);
    a key that may not read the shard hears only that it lost, and to which version."""
    send_event_on_commit(
        "conflict",
        key_prefix=actor.key_prefix,
        agent_id=actor.agent_id,
        shard_id=shard_id,
        version=current["version"],
        winning=current["value"] if actor.sees_values else None,
        rejected=rejected,
        winner_shown=actor.sees_values,
    )


# --- all of them ------------------------------------------------------------------


def rules_check(
    shard: Shard, actor: Actor, rules: WriteRules, *, expected_version: int, value: Any
) -> None:
    """The rules that depend on the shard's own settings and the request alone:
    owners, then the gate. Run by the writer under the lock, and by callers that
    would rather refuse before queueing for it (the same functions, so one rule)."""
    if rules.applies("owners"):
        owner_check(shard, actor.agent_id)
    if rules.applies("gate"):
        gate_check(
            shard,
            rules.approval_id,
            agent_id=actor.agent_id,
            expected_version=expected_version if rules.versioned else None,
            new_value=value,
        )


def rules_locked(
    shard: Shard, actor: Actor, rules: WriteRules, *, expected_version: int, value: Any
) -> None:
    """Every rule, under the write lock, in the order a refusal is decided: the
    shard's settings, the schema, the read set, then the fence (which also
    records a newer fence, so it comes last). A refusal of the shard's settings,
    read set or fence is a ``Refusal``, audited as a refused commit; a value the
    schema refuses is the writer's own 400, as it is before the lock."""
    try:
        rules_check(shard, actor, rules, expected_version=expected_version, value=value)
    except ApiError as error:
        raise refused(error, actor=actor, shard_id=shard.id, expected=expected_version) from None
    if rules.applies("schema"):
        schema_rule(shard, value, rules.schema)
    try:
        read_set_check(rules.read_set)
        fence_check(shard_ids={shard.id}, fence=rules.fence)
    except ApiError as error:
        raise refused(error, actor=actor, shard_id=shard.id, expected=expected_version) from None


def rules_precheck(
    shard: Shard, actor: Actor, rules: WriteRules, *, expected_version: int, value: Any
) -> None:
    """``rules_check`` before queueing for the write lock, so a write its shard's
    settings refuse costs no lock turn; the refusal is audited as a refused
    commit, as it would be under the lock."""
    try:
        rules_check(shard, actor, rules, expected_version=expected_version, value=value)
    except ApiError as error:
        # The refusal's record, not the request's write: its key stays unapplied.
        with applied_marking(None), audited_transaction() as audit:
            audit.append(
                **refused(error, actor=actor, shard_id=shard.id, expected=expected_version).record
            )
        raise
