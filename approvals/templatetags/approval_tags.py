"""Template filters for the console's approval pages."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import mark_safe

from access.auth import can_watch
from approvals import agent_text
from approvals.models import Approval
from approvals.models import status_label as label_of

register = template.Library()


@register.filter
def status_label(status: str) -> str:
    """ "approved_stale" -> "approved – not applied (stale)"; others as they are."""
    return label_of(status)


@register.filter
def marked(segments) -> str:
    """Segments of a line, the changed ones in <mark> (everything escaped)."""
    return mark_safe(
        "".join(
            f'<mark class="wd">{escape(s.text)}</mark>' if s.changed else escape(s.text)
            for s in segments
        )
    )


@register.filter
def markdown_safe(text: str) -> str:
    """The agent's description, markdown rendered safely (approvals/agent_text.py)."""
    return agent_text.markdown_safe(text)


@register.filter
def linked(text: str) -> str:
    """Escaped text with its http(s) URLs as links (approvals/agent_text.py)."""
    return agent_text.linked(text)


OP_LABELS = {
    "add": "added",
    "remove": "removed",
    "replace": "changed",
    "append": "appended",
    "move": "moved",
    "copy": "copied",
    "test": "checked",
}


@register.filter
def op_label(op: str) -> str:
    return OP_LABELS.get(op, op)


@register.simple_tag(takes_context=True)
def pending_count(context) -> int | None:
    """Pending requests, for the navigation and the tab title; None for people
    who may not see approvals (and for anonymous visitors)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not can_watch(user):
        return None
    return Approval.objects.visible_to(user).pending().count()


@register.filter
def ago(moment: datetime, now: datetime | None = None) -> str:
    """ "12 s ago" under a minute, "4 min ago", "2 h 5 min ago", "3 d ago"."""
    return _relative((now or timezone.now()) - moment) + " ago"


@register.filter
def left(moment: datetime, now: datetime | None = None) -> str:
    seconds = (moment - (now or timezone.now())).total_seconds()
    return _relative_seconds(seconds) + " left" if seconds > 0 else "expired"


def _relative(delta: timedelta) -> str:
    return _relative_seconds(delta.total_seconds())


def _relative_seconds(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    # Days, then hours: "170 h" reads as "soon" at a glance, "7 d 2 h" does not.
    return f"{s // 86400} d {s % 86400 // 3600} h"
