"""Template filters for the console's approval pages."""

from __future__ import annotations

from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

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
