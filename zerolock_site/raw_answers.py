"""Answers a web server writes itself, before any application code runs: a
request refused at the socket (a body or head past its limit, a head too slow,
a connection past the server's limits) gets the API's JSON envelope, a length,
and ``Connection: close`` (the rest is never read)."""

from __future__ import annotations

import json
from typing import Any


def closing_json(
    status: int, reason: bytes, data: dict[str, Any], headers: dict[bytes, bytes] | None = None
) -> bytes:
    body = json.dumps(data).encode()
    extra = b"".join(b"%s: %s\r\n" % item for item in (headers or {}).items())
    return (
        b"HTTP/1.1 %d %s\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: %d\r\n"
        b"%s"
        b"Connection: close\r\n\r\n" % (status, reason, len(body), extra)
    ) + body
