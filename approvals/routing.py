"""Who an approval goes to.

Today every console user who may decide approvals (``decide_approval``, the
"Risk officers" group, or a superuser) may decide every request. Routing per
shard prefix narrows that (issue 28); this module is the one home of the rule,
and everything that asks "who may see or decide this request, who should hear
of it" calls it: the console's queue and detail pages, the decision
endpoints for signed-in users, email and escalation."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, PermissionsMixin
from django.db.models import Q, QuerySet

from .models import Approval

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


def approval_recipients(approval: Approval) -> QuerySet:
    """The people who may decide ``approval`` now (whether or not they have an
    email address)."""
    return deciders()


def may_decide(user: AbstractBaseUser, approval: Approval) -> bool:
    """Whether a signed-in user may decide this approval."""
    return (
        isinstance(user, PermissionsMixin) and user.is_active and user.has_perm(DECIDE_PERMISSION)
    )
