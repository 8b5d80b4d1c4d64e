"""Who an approval goes to.

An ``ApprovalRoute`` gives the requests on shards whose id starts with its
prefix to an approver group (issue 28); the longest matching prefix wins, and
a request no route matches is unrouted: every console user who may decide
approvals (``decide_approval``) may decide it, as before routing existed.
The route is resolved once, when the request is made, and stored on the
approval (``routed``): changing a route moves no request already made.

This module is the one home of the rule. Everything that asks "who may see or
decide this request, who should hear of it" calls it: the console's queue,
counts, detail, decision and policy pages, the dashboards, email and
escalation. API keys are not people and keep their own rule (scopes and
``approval:decide``); the API accepts no session.

- Superusers (admins) see and decide everything: they can change the routes
  anyway, and someone must be able to unstick a request whose group is empty.
- A routed request is seen only by members of its groups: the approver group,
  and the escalation group once it has escalated. That holds for viewers and
  staff too: outside the groups, the request does not exist for them.
- Deciding it takes membership and ``decide_approval``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from access.auth import can_watch

from .models import Approval, ApprovalRoute

DECIDE_PERMISSION = "approvals.decide_approval"


def deciders() -> QuerySet:
    """Active users who hold the decide permission: directly, through a group,
    or as superusers."""
    users = get_user_model().objects.filter(is_active=True)
    holds = (
        Q(is_superuser=True)
        | Q(
            user_permissions__codename="decide_approval",
            user_permissions__content_type__app_label="approvals",
        )
        | Q(
            groups__permissions__codename="decide_approval",
            groups__permissions__content_type__app_label="approvals",
        )
    )
    return users.filter(holds).distinct()


def route_for(shard_id: str) -> ApprovalRoute | None:
    """The route of the longest prefix ``shard_id`` starts with (case-sensitive,
    as scopes are), or None: unrouted. The filter is done here, not in SQL:
    LIKE is case-insensitive on SQLite and treats "_" and "%" as wildcards, and
    routes are few."""
    best: ApprovalRoute | None = None
    for route in ApprovalRoute.objects.select_related("approver_group", "escalation_group"):
        if shard_id.startswith(route.shard_prefix) and (
            best is None or len(route.shard_prefix) > len(best.shard_prefix)
        ):
            best = route
    return best


@dataclass(frozen=True)
class Routed:
    """What a new request stores of its route (``Approval``'s routing fields)."""

    approver_group_id: int | None = None
    escalation_group_id: int | None = None
    escalate_at: datetime | None = None

    def fields(self) -> dict[str, Any]:
        return {
            "approver_group_id": self.approver_group_id,
            "escalation_group_id": self.escalation_group_id,
            "escalate_at": self.escalate_at,
        }


def routed(shard_id: str, *, created_at: datetime) -> Routed:
    """The routing a request made now on ``shard_id`` keeps for its life."""
    route = route_for(shard_id)
    if route is None:
        return Routed()
    escalates = route.escalate_after_seconds is not None and route.escalation_group_id is not None
    return Routed(
        approver_group_id=route.approver_group_id,
        escalation_group_id=route.escalation_group_id if escalates else None,
        escalate_at=created_at + timedelta(seconds=route.escalate_after_seconds or 0)
        if escalates
        else None,
    )


def _group_ids(user: Any) -> set[int]:
    return set(user.groups.values_list("id", flat=True))


def current_group_ids(approval: Approval) -> set[int]:
    """The groups a routed request belongs to now (empty when unrouted)."""
    groups = {approval.approver_group_id} if approval.approver_group_id else set()
    if approval.escalated_at is not None and approval.escalation_group_id:
        groups.add(approval.escalation_group_id)
    return groups


def seen_groups(user: Any) -> frozenset[int] | None:
    """The groups through which ``user`` sees routed requests; None: every
    request (a superuser). For a caller that asks many times about one user
    (the live page's socket)."""
    return None if user.is_superuser else frozenset(_group_ids(user))


def sees(groups: frozenset[int] | None, approval_groups: set[int] | frozenset[int]) -> bool:
    """Whether a watcher with these ``seen_groups`` sees a request in these
    groups (``current_group_ids``; empty: unrouted, seen by every watcher)."""
    return groups is None or not approval_groups or bool(groups & approval_groups)


def may_see(user: Any, approval: Approval) -> bool:
    """Whether a signed-in user may see this approval in the console."""
    return can_watch(user) and sees(seen_groups(user), current_group_ids(approval))


def may_decide(user: Any, approval: Approval) -> bool:
    """Whether a signed-in user may decide this approval."""
    return bool(user.is_active and user.has_perm(DECIDE_PERMISSION) and may_see(user, approval))


def visible_q(user: Any) -> Q:
    """``may_see`` as a filter (``Approval.objects.visible_to``)."""
    if not can_watch(user):
        return Q(pk__in=[])
    if user.is_superuser:
        return Q()
    groups = _group_ids(user)
    return (
        Q(approver_group__isnull=True)
        | Q(approver_group__in=groups)
        | Q(escalated_at__isnull=False, escalation_group__in=groups)
    )


def approval_recipients(approval: Approval) -> QuerySet:
    """The people who may decide ``approval`` now (whether or not they have an
    email address): unrouted, every decider; routed, the deciders in its groups
    (the approver group, and the escalation group once escalated). Superusers
    outside the groups may decide it but are not told of it."""
    if approval.approver_group_id is None:
        return deciders()
    return deciders().filter(groups__in=current_group_ids(approval)).distinct()


def escalation_recipients(approval: Approval) -> QuerySet:
    """Who an escalation tells: the deciders of the escalation group."""
    if approval.escalation_group_id is None:
        return deciders().none()
    return deciders().filter(groups=approval.escalation_group_id).distinct()
