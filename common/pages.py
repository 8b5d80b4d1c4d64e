"""List pages bounded in bytes as well as items, built from rows fetched in chunks.

A page of 1,000 shards of 1 MB was built whole (rows, Python values, the
rendered JSON) and took the web process (Daphne then) from 179 to 727 MB; four at
once reached 2.7 GB.
Here rows come from the database in small chunks, each item is encoded to JSON
as soon as it is read (and its row dropped), and the page stops adding items
once it would pass ``ZEROLOCK_LIST_MAX_BYTES``: what the page holds is at most
that, plus one item. The caller says where to continue (``next``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.http import HttpResponse
from rest_framework.request import Request

Row = TypeVar("Row")

# Rows fetched per database round trip: few, since a row may carry a 1 MB value
# and a 4 MiB page holds only a handful of those (measured: 16 peaked at 391 MB
# over four clients, 4 at the figure in tests/shards/test_list_memory.py).
FETCH_CHUNK = 4


def encode(data: Any) -> bytes:
    """The same compact UTF-8 JSON as DRF's renderer."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class Page:
    parts: list[bytes]
    last: Any  # the last row included (None if none)
    more: bool  # rows remain after ``last``

    def json_list(self) -> bytes:
        return b"[" + b",".join(self.parts) + b"]"


def page_collect(rows: Iterable[Row], render: Callable[[Row], Any], *, limit: int | None) -> Page:
    """Renders rows until ``limit`` items or the byte cap; ``rows`` should yield at
    least ``limit + 1`` rows when more exist, so ``more`` is exact."""
    max_bytes = settings.ZEROLOCK_LIST_MAX_BYTES
    parts: list[bytes] = []
    size = 0
    last = None
    for row in rows:
        if limit is not None and len(parts) >= limit:
            return Page(parts, last, True)
        part = encode(render(row))
        # One item larger than the cap still goes out alone, or it could never be read.
        if parts and size + len(part) + 1 > max_bytes:
            return Page(parts, last, True)
        parts.append(part)
        size += len(part) + 1
        last = row
    return Page(parts, last, False)


def json_response(body: bytes, status: int = 200) -> HttpResponse:
    return HttpResponse(body, status=status, content_type="application/json")


def url_with(request: Request, *, drop: tuple[str, ...] = (), **values: Any) -> str:
    """This request's absolute URL with the query parameters in ``drop`` left
    out and those in ``values`` set."""
    params = request.query_params.copy()
    for name in drop:
        params.pop(name, None)
    for name, value in values.items():
        params[name] = str(value)
    query = params.urlencode()
    return request.build_absolute_uri(f"{request.path}?{query}" if query else request.path)


def next_url(request: Request, param: str, value: Any, *, drop: tuple[str, ...] = ()) -> str:
    return url_with(request, drop=drop, **{param: value})


def list_response(request: Request, page: Page, param: str, value: Any) -> HttpResponse:
    """A bare JSON list (the contract's shape); a cut-short list says where it
    goes on in a ``Link: <url>; rel="next"`` header."""
    response = json_response(page.json_list())
    if page.more:
        response["Link"] = f'<{next_url(request, param, value)}>; rel="next"'
    return response
