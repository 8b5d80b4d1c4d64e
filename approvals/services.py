"""Writes for approval gates. Each rule lives in one function: the request
checks in ``approval_request``, deciding (self-approval, expiry, quorum, the
commit through the one version writer) in ``approval_decide``, expiry in ``approval_expire``.

Quorum counts principals (an API key, or a console user), never the agent ids
one key claims; a principal decides a request at most once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from access.identity import Actor
from access.models import ApiKey
from audit.chain import AuditWriter, audited_transaction, value_digest
from audit.models import AuditAction
from common.errors import ApiError, ErrorCode, Invalid, PermissionDenied
from common.events import send_event_on_commit
from common.inputs import iso_time
from shards.models import Shard, ShardType
from shards.rules import Exemption, WriteRules, owner_check
from shards.selectors import shard_get
from shards.value_schema import value_validate
from shards.writer import version_write, write_transaction
from shards.writetx import WriteTx

from . import emails, policies, routing, webhooks
from .diffs import proposed_value_check, value_diff
from .models import (
    Approval,
    ApprovalDecision,
    ApprovalStatus,
    DecisionKind,
    EmailEvent,
    PolicyEffect,
    WebhookEvent,
)
from .routing import approval_recipients
from .selectors import approval_get

DEFAULT_TTL_SECONDS = 3600
MIN_TTL_SECONDS = 10
MAX_TTL_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class Decider:
    """Who decides: a person in the console or an agent with approval:decide."""

    name: str  # "user:alice" or "agent:reviewer-1": what the audit log shows
    # Who counts toward the quorum: "key:<prefix>" or "user:<id>".
    principal: str
    agent_id: str = ""
    key_prefix: str = ""
    user_id: int | None = None

    @classmethod
    def user(cls, user: AbstractBaseUser) -> Decider:
        return cls(name=f"user:{user.get_username()}", principal=f"user:{user.pk}", user_id=user.pk)

    @classmethod
    def agent(cls, actor: Actor, *, user_id: int | None = None) -> Decider:
        """``user_id``: the person the key belongs to (``ApiKey.user``), whose
        principal it then is: one person's login and keys count once."""
        # Every API caller has a key; "agent:" is only for in-process callers without one.
        if user_id is not None:
            principal = f"user:{user_id}"
        elif actor.key_prefix:
            principal = f"key:{actor.key_prefix}"
        else:
            principal = f"agent:{actor.agent_id}"
        return cls(
            name=f"agent:{actor.agent_id}",
            principal=principal,
            agent_id=actor.agent_id,
            key_prefix=actor.key_prefix,
            user_id=user_id,
        )


def decider_check(approval: Approval, decider: Decider) -> None:
    """Who may decide: never the requester (by agent, by key, or by the person
    its key belongs to); and, where ZEROLOCK_APPROVALS_DISTINCT_USERS is on, only a
    person (a console user, or a key tied to one), so that a quorum of N is N
    people and not one person's N keys."""
    requester_user = (
        ApiKey.objects.filter(prefix=approval.requested_key_prefix)
        .values_list("user_id", flat=True)
        .first()
        if approval.requested_key_prefix
        else None
    )
    if (
        decider.name == f"agent:{approval.requested_by}"
        or (decider.key_prefix and decider.key_prefix == approval.requested_key_prefix)
        or (decider.user_id is not None and decider.user_id == requester_user)
    ):
        raise ApiError(
            ErrorCode.SELF_APPROVAL,
            "The requester cannot decide its own request.",
            approval_id=approval.id,
        )
    if settings.ZEROLOCK_APPROVALS_DISTINCT_USERS and decider.user_id is None:
        raise PermissionDenied(
            "approval:decide by a user",
            "This server counts approvals by person (ZEROLOCK_APPROVALS_DISTINCT_USERS): "
            "decide in the console, or with a key that belongs to a user "
            "(manage.py createapikey --user NAME, or the key's User in the admin).",
        )


def approval_request(
    *,
    actor: Actor,
    shard_id: str,
    proposed_value: Any,
    expected_version: int,
    description: str,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    metadata: dict[str, Any] | None = None,
    key_name: str = "",
    previous_id: str = "",
) -> Approval:
    if not MIN_TTL_SECONDS <= ttl_seconds <= MAX_TTL_SECONDS:
        raise Invalid(
            f"ttl_seconds must be between {MIN_TTL_SECONDS} and {MAX_TTL_SECONDS}.",
            fields={"ttl_seconds": ["out of range"]},
        )
    if previous_id:
        previous_check(previous_id, shard_id=shard_id, actor=actor)
    shard = shard_get(shard_id)
    if shard.type != ShardType.DECISION:
        raise Invalid(
            "Approvals gate decision shards; additive shards merge and are never approved.",
            fields={"shard_id": ["not a decision shard"]},
        )
    # Refuse now what the commit would refuse later, while the agent is listening.
    owner_check(shard, actor.agent_id)
    proposed_value_check(proposed_value)
    value_validate(shard.value_schema, proposed_value)
    # Everything that can fail comes before the store; the diff is computed here,
    # once, outside the write lock, and never again while the shard stays put.
    diff = value_diff(shard.value, proposed_value)
    now = timezone.now()
    route = routing.routed(shard_id, created_at=now)
    # A write transaction: a standing policy may decide, and so commit, in it.
    with write_transaction() as tx:
        audit = tx.audit
        approval = Approval.objects.create(
            shard_id=shard_id,
            description=description,
            requested_by=actor.agent_id,
            requested_key_prefix=actor.key_prefix,
            requested_key_name=key_name,
            metadata=metadata or {},
            proposed_value=proposed_value,
            proposed_hash=value_digest(proposed_value),
            expected_version=expected_version,
            value_at_request=shard.value,
            version_at_request=shard.version,
            approvals_required=shard.approvals_required,
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_seconds),
            diff=diff.patch,
            diff_omitted=diff.omitted,
            previous_id=previous_id,
            **route.fields(),
        )
        audit.append(
            action=AuditAction.APPROVAL_REQUESTED,
            agent_id=actor.agent_id,
            key_prefix=actor.key_prefix,
            shard_id=shard_id,
            version_before=expected_version,
            value=proposed_value,
            details={
                "approval_id": approval.id,
                "ttl_seconds": ttl_seconds,
                **({"previous_id": previous_id} if previous_id else {}),
            },
        )
        send_event_on_commit("approval_changed", approval=approval, event="requested")
        webhooks.emit(WebhookEvent.REQUESTED, approval)
        _policy_decide(tx, approval, shard)
        # Mail asks a person to decide: not when a standing policy already has.
        if approval.status == ApprovalStatus.PENDING:
            emails.email_officers(EmailEvent.REQUESTED, approval, approval_recipients(approval))
    return approval


def _policy_decide(tx: WriteTx, approval: Approval, shard: Shard) -> None:
    """A new request that a live standing policy matches is decided by it now,
    in the request's own transaction, through ``_decide`` like a person's
    decision (quorum, the commit, approved_stale). At most one policy decides:
    a reject first, else the oldest approve; one whose author made the request
    (``decider_check``), or a console user's for a request routed away from
    them (``routing.may_decide``), is passed over. Rules: approvals.policies."""
    for policy in policies.policies_matching(approval, shard):
        decider = Decider(
            name=policy.principal,
            principal=policy.principal,
            key_prefix=policy.author_key_prefix,
            user_id=policy.author_user_id,
        )
        if policy.created_by == f"agent:{approval.requested_by}":
            continue  # its author asking, through another key: self-approval all the same
        if (
            policy.created_by.startswith("user:")
            and policy.author_user is not None
            and not routing.may_decide(policy.author_user, approval)
        ):
            continue  # a person's policy decides only what they could decide (routing)
        try:
            decider_check(approval, decider)
        except ApiError:  # self-approval (or not a person, where people are required)
            continue
        approve = policy.effect == PolicyEffect.APPROVE
        rule = {"policy_id": policy.id, "when": policy.when, "effect": policy.effect}
        _decide(tx, approval, decider, approve, policy.reason, audited={"policy": rule})
        return


def previous_check(previous_id: str, *, shard_id: str, actor: Actor) -> None:
    """A request may follow an earlier one of the same shard by the same key."""
    previous = Approval.objects.filter(pk=previous_id).first()
    if previous is None:
        raise ApiError(
            ErrorCode.APPROVAL_NOT_FOUND,
            f"No approval {previous_id!r}.",
            approval_id=previous_id,
        )
    if previous.shard_id != shard_id:
        raise Invalid(
            f"Approval {previous_id} is for shard {previous.shard_id!r}, not {shard_id!r}.",
            fields={"previous_id": ["another shard's approval"]},
        )
    if previous.requested_key_prefix != actor.key_prefix:
        raise Invalid(
            f"Approval {previous_id} was requested with another key.",
            fields={"previous_id": ["another key's approval"]},
        )


class _NoEdit:
    """``edited_value`` absent (None is a value an officer may approve)."""


NO_EDIT: Any = _NoEdit()


def approval_decide(
    *,
    approval_id: str,
    decider: Decider,
    approve: bool,
    reason: str = "",
    edited_value: Any = NO_EDIT,
    request_changes: bool = False,
    expected_value_hash: str | None = None,
) -> Approval:
    """Approve or reject, or (``request_changes``) end the request with a message
    for the agent. The final approval applies the commit through the same OCC
    function as a direct commit, in the same transaction. ``edited_value``: the
    decider approves this instead of the proposal (``_edit``: checked like a commit
    before anything is stored). ``expected_value_hash``: approve only while the
    value to apply is still the one the decider saw (``value_seen_check``)."""
    reason = reason.strip()
    if request_changes and not reason:
        raise Invalid(
            "A request for changes needs a message for the agent.",
            fields={"message": ["required"]},
        )
    if not approve and not reason:
        raise Invalid(
            "A rejection needs a reason.",
            fields={"reason": ["required"]},
        )
    kind = DecisionKind.PLAIN
    if request_changes:
        approve, kind = False, DecisionKind.REQUEST_CHANGES
    elif approve and edited_value is not NO_EDIT:
        kind = DecisionKind.EDIT
    expired = False
    with write_transaction() as tx:
        audit = tx.audit
        approval = approval_get(approval_id)
        decider_check(approval, decider)
        if approval.status == ApprovalStatus.PENDING and approval.is_expired():
            approval_expire(audit=audit, approval=approval, by="decision")
            expired = True
        elif approval.status == ApprovalStatus.EXPIRED:
            expired = True
        elif approval.status != ApprovalStatus.PENDING:
            raise ApiError(
                ErrorCode.APPROVAL_NOT_PENDING,
                f"Approval {approval_id} is already {approval.status}.",
                current_status=approval.status,
            )
        else:
            if approve and expected_value_hash:
                value_seen_check(approval, expected_value_hash)
            audited = None
            if kind == DecisionKind.EDIT:
                audited = _edit(approval, decider, edited_value)
                kind = DecisionKind.EDIT if audited else DecisionKind.PLAIN
            _decide(tx, approval, decider, approve, reason, kind, audited or {})
    if expired:
        raise ApiError(
            ErrorCode.APPROVAL_EXPIRED,
            f"Approval {approval_id} expired at {iso_time(approval.expires_at)}.",
            expires_at=iso_time(approval.expires_at),
        )
    return approval


def value_seen_check(approval: Approval, expected_value_hash: str) -> None:
    """Under the decision's lock: another decider's edit since this one looked
    (the value to apply no longer hashes to what they saw) refuses the approval,
    so nobody approves a value they never saw (docs/decisions.md)."""
    applied_hash = value_digest(approval.value_to_apply)
    if applied_hash != expected_value_hash:
        raise ApiError(
            ErrorCode.APPROVAL_VALUE_CHANGED,
            f"The value approval {approval.id} would apply changed since you saw it "
            f"(edited by {approval.edited_by or 'another decider'}): review it and decide again.",
            applied_value=approval.value_to_apply,
            applied_value_hash=applied_hash,
            edited_by=approval.edited_by,
        )


def _edit(approval: Approval, decider: Decider, edited_value: Any) -> dict[str, Any] | None:
    """An approval with edits: the edited value is checked as the commit would
    check it (size, the shard's schema and owners) and any refusal leaves the
    request pending with nothing stored. Then it becomes the value the request
    applies, and approvals cast for the value it replaces stop counting (their
    principals may approve the new value): a vote counts for the value it saw,
    so a quorum is never reached by votes for different values. An "edit" equal
    to the value already to apply is a plain approval and resets nothing (None).
    Returns what the decision's audit entry adds."""
    if value_digest(edited_value) == value_digest(approval.value_to_apply):
        return None
    shard = shard_get(approval.shard_id)
    owner_check(shard, approval.requested_by)
    proposed_value_check(edited_value, "edited_value")
    value_validate(shard.value_schema, edited_value)
    replaced = approval.decisions.filter(approve=True, counts=True).exclude(
        principal=decider.principal
    )
    # For the decision's audit entry (``_decide``), which also records the edited value.
    audited = {
        "edited": True,
        "proposed_hash": value_digest(approval.proposed_value),
        "replaced_hash": value_digest(approval.value_to_apply),
        "edited_hash": value_digest(edited_value),
        "votes_reset": sorted(replaced.values_list("principal", flat=True)),
    }
    replaced.update(counts=False)
    # The editor's own earlier approval (of the value it now replaces) gives way too.
    approval.decisions.filter(principal=decider.principal, counts=True).update(counts=False)
    approval.edited_value, approval.edited_by = edited_value, decider.name
    approval.save(update_fields=["edited_value", "edited_by"])
    return audited


def _decide(
    tx: WriteTx,
    approval: Approval,
    decider: Decider,
    approve: bool,
    reason: str,
    kind: DecisionKind = DecisionKind.PLAIN,
    audited: dict[str, Any] | None = None,
) -> None:
    """``audited``: what the decision's audit entry adds (an edit's hashes, or the
    standing policy that decides, as ``policy``)."""
    audit = tx.audit
    # Writers are serialised by the audit head lock, so this check cannot race;
    # the partial unique constraint backs it up. Only counted decisions: an
    # approval an edit replaced leaves its principal free to approve the edit.
    earlier = approval.decisions.filter(principal=decider.principal, counts=True).first()
    if earlier is not None:
        raise ApiError(
            ErrorCode.ALREADY_DECIDED,
            f"{decider.principal} has already decided this request (as {earlier.decider}); "
            "a key or a person counts once, whatever agent id it acts as.",
            approval_id=approval.id,
            principal=decider.principal,
            decided_as=earlier.decider,
        )
    now = timezone.now()
    ApprovalDecision.objects.create(
        approval=approval,
        decider=decider.name,
        principal=decider.principal,
        key_prefix=decider.key_prefix,
        api_key=ApiKey.objects.filter(prefix=decider.key_prefix).first()
        if decider.key_prefix
        else None,
        user_id=decider.user_id,
        agent_id=decider.agent_id,
        approve=approve,
        kind=kind,
        reason=reason,
        created_at=now,
    )
    approvals = approval.approvals_counted()
    action = AuditAction.APPROVAL_APPROVED if approve else AuditAction.APPROVAL_REJECTED
    if kind == DecisionKind.REQUEST_CHANGES:
        action = AuditAction.APPROVAL_CHANGES_REQUESTED
    # An edit's entry holds the edited value beside the proposal's hash (``_edit``).
    edit_value = {"value": approval.edited_value} if kind == DecisionKind.EDIT else {}
    audit.append(
        action=action,
        **edit_value,
        agent_id=decider.name,
        key_prefix=decider.key_prefix,
        shard_id=approval.shard_id,
        details={
            "approval_id": approval.id,
            "principal": decider.principal,
            "reason": reason,
            "approvals": approvals,
            "approvals_required": approval.approvals_required,
            **({"kind": kind.value} if kind else {}),
            **(audited or {}),
        },
    )
    if approve and approvals < approval.approvals_required:
        send_event_on_commit("approval_changed", approval=approval, event="approved_partly")
        return
    approval.status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
    if kind == DecisionKind.REQUEST_CHANGES:
        approval.status = ApprovalStatus.CHANGES_REQUESTED
    approval.decided_at, approval.decided_by, approval.reason = now, decider.name, reason
    if approve:
        approval.commit = _apply(tx, approval, decider)
        approval.status = (
            ApprovalStatus.COMMITTED
            if "version" in approval.commit
            else ApprovalStatus.APPROVED_STALE
        )
    approval.save(update_fields=["status", "decided_at", "decided_by", "reason", "commit"])
    send_event_on_commit("approval_changed", approval=approval, event="decided")
    webhooks.emit(WebhookEvent.DECIDED, approval)


def _apply(tx: WriteTx, approval: Approval, decider: Decider) -> dict[str, Any]:
    """The approved commit, against the version the request named, through the
    one version writer with every rule but the gate, whose own decision this is
    (``Exemption.APPROVED``): lease sweep, owners, schema, one audit entry and
    the approval's "committed" record, metrics, push. The shard's rules are read
    again now: an owner list or a schema changed since the request refuses the
    commit rather than slipping past it."""
    shard = Shard.objects.without_payload().filter(pk=approval.shard_id).first()
    error: str = ""
    result = None
    if shard is None:
        error = ErrorCode.SHARD_NOT_FOUND
    else:
        actor = Actor(agent_id=approval.requested_by, key_prefix=approval.requested_key_prefix)
        try:
            result = version_write(
                tx=tx,
                shard=shard,
                actor=actor,
                expected_version=approval.expected_version,
                value=approval.value_to_apply,
                rules=WriteRules(
                    approval_id=approval.id,
                    exemption=Exemption.APPROVED,
                    details={
                        "approved_by": decider.name,
                        **({"edited_by": approval.edited_by} if approval.edited else {}),
                    },
                ),
            )
        except ApiError as refusal:  # nothing was written: the approval shows why
            error = refusal.code
        else:
            if result is None:
                error = ErrorCode.STALE_VERSION
    if result is None:
        current = (
            Shard.objects.filter(pk=approval.shard_id).values_list("version", flat=True).first()
        )
        commit = {
            "error": error,
            "expected_version": approval.expected_version,
            "current_version": current,
        }
        tx.audit.append(
            action=AuditAction.APPROVAL_COMMIT_FAILED,
            agent_id=decider.name,
            shard_id=approval.shard_id,
            version_before=approval.expected_version,
            details={
                "approval_id": approval.id,
                "status": ApprovalStatus.APPROVED_STALE.value,
                **commit,
            },
        )
        return commit
    return {"version": result.version, "audit_entry_id": result.audit_entry_id}


def approval_expire(*, audit: AuditWriter, approval: Approval, by: str = "") -> None:
    """The one place a pending approval becomes expired (inside a write transaction).
    ``by`` names what noticed (worker, server, decision, shard.delete) for the audit."""
    approval.status = ApprovalStatus.EXPIRED
    approval.decided_at = timezone.now()
    approval.save(update_fields=["status", "decided_at"])
    audit.append(
        action=AuditAction.APPROVAL_EXPIRED,
        agent_id="system",
        shard_id=approval.shard_id,
        details={
            "approval_id": approval.id,
            "expires_at": iso_time(approval.expires_at),
            **({"expired_by": by} if by else {}),
        },
    )
    send_event_on_commit("approval_changed", approval=approval, event="decided")
    webhooks.emit(WebhookEvent.EXPIRED, approval)


def approval_expire_due(*, now: datetime | None = None, by: str = "") -> int:
    """Marks every pending approval past its deadline expired (Celery beat runs this)."""
    expired = 0
    for approval_id in Approval.objects.due(now).values_list("id", flat=True)[:500]:
        with audited_transaction() as audit:
            approval = Approval.objects.due(now).filter(pk=approval_id).first()
            if approval is not None:  # a decision may have got there first
                approval_expire(audit=audit, approval=approval, by=by)
                expired += 1
    return expired


def approval_escalate_due(*, now: datetime | None = None) -> int:
    """Pending approvals past their ``escalate_at`` with no decision go to their
    escalation group too: each is marked ``escalated_at`` exactly once, however
    many sweeps run at the same moment (the worker's beat and the server's
    tick), because the mark is a conditional UPDATE that only one of them can
    win; the winner writes the audit entry and the webhook deliveries in the
    same transaction (mails for the escalation group's deciders too), and tells
    the console after the commit."""
    now = now or timezone.now()
    escalated = 0
    due = Approval.objects.pending(now).filter(
        escalate_at__lte=now, escalated_at__isnull=True, escalation_group__isnull=False
    )
    for approval_id in due.values_list("id", flat=True)[:500]:
        with audited_transaction() as audit:
            # A decision or another sweep may have got there first.
            if not due.filter(pk=approval_id).update(escalated_at=now):
                continue
            approval = Approval.objects.select_related("escalation_group").get(pk=approval_id)
            audit.append(
                action=AuditAction.APPROVAL_ESCALATED,
                agent_id="system",
                shard_id=approval.shard_id,
                details={
                    "approval_id": approval.id,
                    "escalate_at": iso_time(approval.escalate_at),
                    "escalation_group": approval.escalation_group.name
                    if approval.escalation_group
                    else "",
                },
            )
            send_event_on_commit("approval_changed", approval=approval, event="escalated")
            webhooks.emit(WebhookEvent.ESCALATED, approval)
            # The escalation group's deciders are mailed (queued after commit).
            emails.email_officers(
                EmailEvent.ESCALATED, approval, routing.escalation_recipients(approval)
            )
            escalated += 1
    return escalated


def approvals_end(audit: AuditWriter, shard_id: str) -> None:
    """A shard is being deleted (a registered delete hook): its open approvals
    (pending, or approved and not yet applied) expire with it. Approved against
    this shard, they must never apply to a shard re-created under its id."""
    open_ = Approval.objects.filter(
        shard_id=shard_id,
        status__in=[
            ApprovalStatus.PENDING,
            ApprovalStatus.APPROVED,
            ApprovalStatus.APPROVED_STALE,
        ],
    )
    for approval in open_.select_for_update():
        approval_expire(audit=audit, approval=approval, by="shard.delete")
