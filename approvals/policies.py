"""Standing approval policies: a rule that decides matching approval requests at
once, so an officer is not asked a hundred times for the same small payment.

The safety rules, each in one place here (docs/decisions.md explains them):
- a policy decides as ONE principal, "policy:<id>", and at most one policy
  decides a request, so policies never make up a quorum between them;
- it never decides a request made through its author's own key, or by a key of
  its author's user (``services.decider_check``, the rule a person's decision obeys);
- it never outlives ``expires_at`` (``ApprovalPolicy.objects.live``);
- a matching reject policy wins over any matching approve policy;
- every creation and deletion is in the audit log, with the whole policy."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from access.models import ApiKey
from audit.chain import audited_transaction
from audit.models import AuditAction
from common.errors import ApiError, ErrorCode, Invalid, OutOfScope
from common.inputs import iso_time
from common.jsonpaths import path_get
from common.prefixes import prefix_matches, scope_within
from coordination.txn import Compare, compare_holds, value_compare_parse
from shards.models import Shard

from .models import Approval, ApprovalPolicy, PolicyEffect
from .review import _tokens as pointer_tokens

MIN_POLICY_SECONDS = 60
MAX_POLICY_SECONDS = 30 * 24 * 3600  # a standing rule is reviewed at least monthly
MAX_WHEN = 20


def when_parse(raw: Any) -> list[Compare]:
    """``when`` as the transaction compares it is made of (400 INVALID otherwise)."""
    if not isinstance(raw, list) or len(raw) > MAX_WHEN:
        raise Invalid(
            f"when must be a list of at most {MAX_WHEN} compares.",
            fields={"when": ["not a list of compares"]},
        )
    return [value_compare_parse(item, f"when[{i}]") for i, item in enumerate(raw)]


def policy_expiry(
    *, ttl_seconds: int | None, expires_at: datetime | None, now: datetime
) -> datetime:
    if (ttl_seconds is None) == (expires_at is None):
        raise Invalid(
            "Give exactly one of ttl_seconds and expires_at.",
            fields={"ttl_seconds": ["exactly one of ttl_seconds and expires_at"]},
        )
    end = expires_at if expires_at is not None else now + timedelta(seconds=ttl_seconds or 0)
    if (
        not now + timedelta(seconds=MIN_POLICY_SECONDS)
        <= end
        <= now + timedelta(seconds=MAX_POLICY_SECONDS)
    ):
        raise Invalid(
            f"A policy lasts between {MIN_POLICY_SECONDS} s and {MAX_POLICY_SECONDS} s from now.",
            fields={"expires_at" if expires_at is not None else "ttl_seconds": ["out of range"]},
        )
    return end


def policy_data(policy: ApprovalPolicy) -> dict[str, Any]:
    return {
        "id": policy.id,
        "shard_prefix": policy.shard_prefix,
        "requested_by": policy.requested_by,
        "key_prefix": policy.key_prefix,
        "when": policy.when,
        "effect": policy.effect,
        "reason": policy.reason,
        "created_at": iso_time(policy.created_at),
        "expires_at": iso_time(policy.expires_at),
        "created_by": policy.created_by,
        "live": policy.expires_at > timezone.now(),
    }


def policy_create(
    *,
    created_by: str,
    author_key: ApiKey | None,
    author_user_id: int | None,
    shard_prefix: str,
    effect: str,
    reason: str,
    when: Any = None,
    requested_by: str = "",
    key_prefix: str = "",
    ttl_seconds: int | None = None,
    expires_at: datetime | None = None,
) -> ApprovalPolicy:
    """``author_key``: the key that creates it (None from the console). A scoped
    key may only create policies within its scopes: its reach is the shards whose
    ids start with ``shard_prefix``, which must lie within the key's prefixes."""
    when = when if when is not None else []
    when_parse(when)
    if effect not in PolicyEffect.values:
        raise Invalid("effect must be approve or reject.", fields={"effect": ["invalid"]})
    reason = reason.strip()
    if not reason:
        raise Invalid("A policy needs a reason.", fields={"reason": ["required"]})
    if author_key is not None and not scope_within([shard_prefix], author_key.shard_prefixes):
        raise OutOfScope([shard_prefix or "(every shard)"], author_key.shard_prefixes)
    now = timezone.now()
    end = policy_expiry(ttl_seconds=ttl_seconds, expires_at=expires_at, now=now)
    with audited_transaction() as audit:
        # Counted under the audit head's lock, so two creations cannot both pass.
        policies_per_author_check(author_key, author_user_id, now)
        policy = ApprovalPolicy.objects.create(
            shard_prefix=shard_prefix,
            requested_by=requested_by,
            key_prefix=key_prefix,
            when=when,
            effect=effect,
            reason=reason,
            created_at=now,
            expires_at=end,
            created_by=created_by,
            author_key_prefix=author_key.prefix if author_key is not None else "",
            author_user_id=author_user_id,
        )
        audit.append(
            action=AuditAction.APPROVAL_POLICY_CREATED,
            agent_id=created_by,
            key_prefix=policy.author_key_prefix,
            details={"policy": policy_data(policy)},
        )
    return policy


def policies_per_author_check(
    author_key: ApiKey | None, author_user_id: int | None, now: datetime
) -> None:
    """An author (a key, or a console user) holds at most
    ZEROLOCK_MAX_POLICIES_PER_AUTHOR live policies: every approval request is
    matched against all live policies, so their number is each request's cost."""
    limit = settings.ZEROLOCK_MAX_POLICIES_PER_AUTHOR
    mine = ApprovalPolicy.objects.live(now)
    if author_key is not None:
        mine = mine.filter(author_key_prefix=author_key.prefix)
    else:
        mine = mine.filter(author_key_prefix="", author_user_id=author_user_id)
    live = mine.count()
    if live >= limit:
        raise ApiError(
            ErrorCode.TOO_MANY_POLICIES,
            f"This author already holds {live} live approval policies, the most one may "
            "hold (ZEROLOCK_MAX_POLICIES_PER_AUTHOR). Delete some, or let them expire.",
            limit=limit,
        )


def policy_get(policy_id: str, scopes: list[str]) -> ApprovalPolicy:
    """The policy, or 404 APPROVAL_POLICY_NOT_FOUND (also when outside ``scopes``:
    a scoped key learns nothing of policies beyond its reach)."""
    policy = (
        ApprovalPolicy.objects.within_scopes(scopes).filter(pk=policy_id).first()
        if isinstance(policy_id, str)
        else None
    )
    if policy is None:
        raise ApiError(
            ErrorCode.APPROVAL_POLICY_NOT_FOUND,
            f"No approval policy {policy_id!r}.",
            policy_id=policy_id,
        )
    return policy


def policy_delete(*, policy_id: str, scopes: list[str], deleted_by: str, key_prefix: str) -> None:
    with audited_transaction() as audit:
        policy = policy_get(policy_id, scopes)
        data = policy_data(policy)
        policy.delete()
        audit.append(
            action=AuditAction.APPROVAL_POLICY_DELETED,
            agent_id=deleted_by,
            key_prefix=key_prefix,
            details={"policy": data},
        )


def policy_matches(policy: ApprovalPolicy, approval: Approval, shard: Shard) -> bool:
    """Shard prefix, requester, key and every ``when`` compare on the proposed
    value (the transaction's comparator, on nested paths too)."""
    return (
        prefix_matches(approval.shard_id, policy.shard_prefix)
        and (not policy.requested_by or policy.requested_by == approval.requested_by)
        and (not policy.key_prefix or policy.key_prefix == approval.requested_key_prefix)
        and all(compare_holds(c, shard, approval.proposed_value) for c in when_parse(policy.when))
    )


def policies_matching(approval: Approval, shard: Shard) -> list[ApprovalPolicy]:
    """Live policies that match, rejections first, then oldest first: the one to
    decide is the first whose author may decide (``services`` checks that)."""
    candidates = [
        p
        for p in ApprovalPolicy.objects.live().order_by("created_at", "id")
        if policy_matches(p, approval, shard)
    ]
    return sorted(candidates, key=lambda p: p.effect != PolicyEffect.REJECT)


# --- "Approve, and approve the same kind for 1 hour" (the console) --------------

SAME_KIND_SECONDS = 3600


@dataclass(frozen=True)
class SameKind:
    """A policy covering requests like one in hand, and what it covers in words:
    the console's dialog shows ``covers`` before the officer confirms."""

    fields: dict[str, Any]
    covers: list[str]


def _typed_path(value: Any, tokens: list[str]) -> list[str | int] | None:
    """A JSON pointer's tokens as a compare path (list indexes as integers),
    walking ``value``; None where it leads nowhere."""
    path: list[str | int] = []
    for token in tokens:
        if isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
            path.append(int(token))
        elif isinstance(value, dict) and token in value:
            value = value[token]
            path.append(token)
        else:
            return None
    return path


def same_kind(approval: Approval) -> SameKind | None:
    """The policy "the same kind" means, from the stored diff of the request:
    the exact shard id as the prefix, the same requester through the same key,
    and for each changed path: a number between 0 and the proposed one (``>=``
    and ``<=``), any other value exactly the proposed one (``==``), a removal removed
    (``not_exists``). Paths the request did not change are not checked. None when
    there is no diff to read it from (too large, or nothing changes)."""
    if not approval.diff:
        return None
    when: list[dict[str, Any]] = []
    covers: list[str] = []
    for change in approval.diff[:MAX_WHEN]:
        tokens = pointer_tokens(change.get("path", ""))
        shown = "/".join(tokens) or "(the whole value)"
        if change.get("op") == "remove":
            path = _typed_path(approval.value_at_request, tokens)
            if path is None:
                return None
            when.append({"path": path, "op": "not_exists"})
            covers.append(f"{shown} is absent")
            continue
        path = _typed_path(approval.proposed_value, tokens)
        if path is None:
            return None
        new = path_get(approval.proposed_value, tuple(path))
        if isinstance(new, int | float) and not isinstance(new, bool):
            # A range from 0 to the proposed number: no larger, and never across
            # zero (approving a payment of 900 must not approve one of -5,000,000).
            low, high = min(0, new), max(0, new)
            when.append({"path": path, "op": ">=", "value": low})
            when.append({"path": path, "op": "<=", "value": high})
            covers.append(f"{shown} is a number from {json.dumps(low)} to {json.dumps(high)}")
        else:
            when.append({"path": path, "op": "==", "value": new})
            covers.append(f"{shown} is exactly {json.dumps(new)[:200]}")
    if len(approval.diff) > MAX_WHEN or len(when) > MAX_WHEN:
        return None
    fields = {
        "shard_prefix": approval.shard_id,
        "requested_by": approval.requested_by,
        "key_prefix": approval.requested_key_prefix,
        "when": when,
        "effect": PolicyEffect.APPROVE.value,
        "ttl_seconds": SAME_KIND_SECONDS,
    }
    return SameKind(fields, covers)
