"""Daphne's Twisted request parses form bodies that nobody reads.

Twisted's ``Request.requestReceived`` parses every POST's Content-Type with the
``email`` package and, for urlencoded or multipart bodies, the whole body into
``request.args``. Daphne never reads ``args``: it hands the raw body to the
application, which parses it again. Measured (bench/profile.py commit --gil),
the Content-Type parse alone was 6.5 % of the server's CPU per commit, and a
multipart body paid for a second, unbounded parse. Telling Twisted that no
body is a form skips both; query-string arguments are parsed as before.

Installed once from ``zerolock_site/asgi.py``.
"""

from __future__ import annotations


def _no_form(line: bytes) -> bytes:
    return b""


def install_daphne_skip_form_parsing() -> None:
    from twisted.web import http

    http._parseContentType = _no_form
