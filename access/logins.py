"""Console and admin logins, throttled by django-axes (settings: AXES_*).

After ``ZEROLOCK_LOGIN_FAILURE_LIMIT`` failures by one username from one
address, axes' backend refuses that pair for ``ZEROLOCK_LOGIN_COOLOFF_SECONDS``
before any password is checked. This module gives the refusal its page (429,
saying when the lock ends) and its audit entry (one per lock, with the username
and address). The counts live in axes' AccessAttempt rows, so every server
process sees them and the admin can delete them (or ``manage.py
axes_reset_username NAME``)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_client_username, get_cool_off
from django.conf import settings
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from .services import audit_login_locked_out

LOCKED_OUT_TEMPLATE = "registration/locked_out.html"


def lock_ends(request: HttpRequest, credentials: dict[str, Any] | None) -> datetime | None:
    """When the lock on this request's username and address lifts: a cool-down
    after the failure that set it (later attempts do not move it:
    AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT is off). None if no failure
    is on record any more (the admin has just deleted it)."""
    cool_off = get_cool_off(request)
    if cool_off is None:
        return None
    # The same attempts axes counted (its lockout parameters, within the cool-off).
    attempts = AxesProxyHandler.get_implementation().get_user_attempts(request, credentials)
    latest = [a.aggregate(latest=Max("attempt_time"))["latest"] for a in attempts]
    known = [moment for moment in latest if moment is not None]
    return max(known) + cool_off if known else None


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the page a locked-out login gets, in the console's
    style, on both login pages. ``Retry-After`` says the same as the page."""
    until = lock_ends(request, credentials)
    seconds = max(1, math.ceil((until - timezone.now()).total_seconds())) if until else None
    response = render(
        request,
        LOCKED_OUT_TEMPLATE,
        {
            "username": get_client_username(request, credentials) or "",
            "until": until,
            "seconds": seconds,
            "minutes": math.ceil(seconds / 60) if seconds else None,
        },
        status=settings.AXES_HTTP_RESPONSE_CODE,
    )
    if seconds:
        response["Retry-After"] = str(seconds)
    return response


def audit_lockout(
    sender: object, request: HttpRequest, username: str | None, ip_address: str | None, **_: Any
) -> None:
    """axes' ``user_locked_out`` receiver. The signal comes both for the failure
    that locks the pair and for each attempt refused while it is locked; only
    the first has counted failures (axes sets ``axes_failures_since_start``
    when it counts). One entry per lock, as a blocked WebSocket address gets
    one (access/handshakes.py): a script hammering a locked login would
    otherwise write an audit entry per request."""
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is None:
        return
    credentials = getattr(request, "axes_credentials", None)
    audit_login_locked_out(
        username=username or "",
        address=ip_address or "",
        path=request.path,
        failures=failures,
        until=lock_ends(request, credentials),
    )
