"""Template filters for the console's approval pages."""

from __future__ import annotations

from django import template

from approvals.models import status_label as label_of

register = template.Library()


@register.filter
def status_label(status: str) -> str:
    """ "approved_stale" -> "approved – not applied (stale)"; others as they are."""
    return label_of(status)
