"""``Prefer: return=minimal`` (RFC 7240): a write's answer without the value.

An agent that only needs the new version should not pay for shipping the value
back: an append to a 10,000-item array would otherwise answer with all 10,000
items. Views that support it call ``write_answer``; without the header nothing
changes. The answer says what it did with ``Preference-Applied``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

RETURN_MINIMAL = "return=minimal"

# A write's answer as ``write_shape`` gives it: the body and its headers.
Answer = tuple[dict[str, Any], dict[str, str]]


def prefer_of(request: Request) -> str:
    """The request's ``Prefer`` header, or ""."""
    return request.headers.get("Prefer", "")


def prefers_minimal(header: str) -> bool:
    """Whether a ``Prefer`` header value asks for ``return=minimal``.

    RFC 7240: preferences are comma-separated, each ``token [= word] *(; param)``;
    names are case-insensitive, a value may be quoted, and when a preference is
    given more than once only the first counts (``return=representation,
    return=minimal`` is a representation). Anything unreadable is ignored, as
    the RFC asks of preferences a server does not understand."""
    for preference in header.split(","):
        name, _, value = preference.split(";", 1)[0].partition("=")
        if name.strip().lower() != "return":
            continue
        return value.strip().strip('"').lower() == "minimal"
    return False


def write_answer(
    request: Request,
    body: Mapping[str, Any],
    *,
    omit: Iterable[str] = ("value",),
    status: int = 200,
    shown: bool = True,
) -> Response:
    """``body`` as the answer; without ``omit`` (the value) when the request
    prefers ``return=minimal``, marked with ``Preference-Applied``, and always
    without it when ``shown`` is False (a key that may not read the shard's
    values: an additive commit's merged value, a claim's whole queue)."""
    shaped, headers = write_shape(body, prefer=prefer_of(request), omit=omit, shown=shown)
    return shaped_response(shaped, headers, status=status)


def shaped_response(body: Any, headers: Mapping[str, str], *, status: int = 200) -> Response:
    response = Response(body, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


def write_shape(
    body: Mapping[str, Any], *, prefer: str, omit: Iterable[str] = ("value",), shown: bool = True
) -> Answer:
    """What ``write_answer`` answers, without DRF: the body and its headers (the
    direct lane's straight calls build their answer from this)."""
    minimal = prefers_minimal(prefer)
    if shown and not minimal:
        return dict(body), {}
    left_out = set(omit)
    shaped = {k: v for k, v in body.items() if k not in left_out}
    return shaped, ({"Preference-Applied": RETURN_MINIMAL} if minimal else {})
