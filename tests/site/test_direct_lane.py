"""The direct lane (zerolock_site/direct.py): hot calls made in this process go
straight to their view, and answer exactly as the full application does.

Each case runs twice in its own namespace, once through the full Django
application and once through the lane, in one process with the real database;
status, body and the headers a client reads must match. The lane's calls must
never reach the full application, or this would compare it with itself."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from django.conf import settings
from django.core.wsgi import get_wsgi_application

from access.services import api_key_create, api_key_revoke
from common.inprocess import api_headers
from zerolock_site import direct
from zerolock_site.wsgi_bridge import PooledWsgiToAsgi

pytestmark = pytest.mark.django_db(transaction=True)

VOLATILE = re.compile(
    r'"(?:[a-z_]*_at|at|id|lease_id|audit_entry_id|fence|value_hash|revision)": ("[^"]*"|\d+)'
)
# What a client of the socket or /mcp reads besides the body.
SHOWN = (
    "content-type",
    "preference-applied",
    "retry-after",
    "x-ratelimit-limit",
    "location",
    "link",
    "idempotent-replayed",
)


class Recording:
    """The full application, counting the requests that reach it."""

    def __init__(self) -> None:
        self.app = get_wsgi_application()
        self.paths: list[str] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        self.paths.append(environ["PATH_INFO"])
        return self.app(environ, start_response)


def _call(
    bridge: PooledWsgiToAsgi,
    method: str,
    path: str,
    body: Any,
    *,
    raw: str,
    agent: str,
    extra: dict[str, str],
) -> tuple[int, str, dict[str, str]]:
    payload = json.dumps(body).encode() if body is not None else b""
    headers = api_headers(
        host="testserver", raw_key=raw, agent_id=agent, extra=extra, json_body=bool(payload)
    )
    answer = asyncio.run(
        bridge.call(
            method=method,
            path=path,
            headers=headers,
            body=payload,
            client=("127.0.0.1", 5000),
            server=("127.0.0.1", 80),
        )
    )
    shown = {k: v for k, v in answer.headers.items() if k in SHOWN}
    if "retry-after" in shown:
        shown["retry-after"] = "N" if shown["retry-after"].isdigit() else shown["retry-after"]
    parsed = json.loads(answer.content) if answer.content else None
    return answer.status, json.dumps(parsed, sort_keys=True), shown


def _steady(text: str, ns: str) -> str:
    text = re.sub(r"lse_[0-9a-f]+", "lse_X", text.replace(ns, "NS"))
    # Seconds left in the rate limit's minute: the two runs are a moment apart.
    text = re.sub(r'(retry in |"retry_after": )\d+', r"\1N", text)
    return VOLATILE.sub(lambda m: m.group(0).split(":")[0] + ": X", text)


def _script(ns: str) -> list[tuple[str, str, Any, dict[str, str], str]]:
    """(method, path, body, headers, key) over every hot view and its refusals."""
    queue = {"t1": {"status": "pending"}}

    def keyed(
        version: int, value: int, key: str, who: str = "all"
    ) -> tuple[str, str, Any, dict[str, str], str]:
        body = {"expected_version": version, "new_value": value}
        return ("POST", f"/api/shards/{ns}c/commit", body, {"Idempotency-Key": key}, who)

    return [
        (
            "POST",
            "/api/shards",
            {"id": f"{ns}c", "type": "decision", "initial_value": 1},
            {},
            "all",
        ),
        (
            "POST",
            "/api/shards",
            {"id": f"{ns}log", "type": "additive", "crdt_type": "array", "initial_value": []},
            {},
            "all",
        ),
        (
            "POST",
            "/api/shards",
            {"id": f"{ns}q", "type": "decision", "initial_value": queue},
            {},
            "all",
        ),
        ("GET", f"/api/shards/{ns}c", None, {}, "all"),
        ("GET", f"/api/shards/{ns}missing", None, {}, "all"),
        ("GET", f"/api/shards/{ns}c", None, {}, "narrow"),  # outside its scopes
        ("POST", f"/api/shards/{ns}c/commit", {"expected_version": 1, "new_value": 2}, {}, "all"),
        ("POST", f"/api/shards/{ns}c/commit", {"expected_version": 1, "new_value": 3}, {}, "all"),
        ("POST", f"/api/shards/{ns}c/commit", {"expected_version": "x"}, {}, "all"),
        ("POST", f"/api/shards/{ns}c/commit", [1, 2], {}, "all"),
        (
            "POST",
            f"/api/shards/{ns}c/commit",
            {"expected_version": 2, "new_value": 4},
            {},
            "reader",
        ),
        (
            "POST",
            f"/api/shards/{ns}c/commit",
            {"expected_version": 2, "new_value": 4},
            {},
            "anonymous",
        ),
        (
            "POST",
            f"/api/shards/{ns}c/commit",
            {"expected_version": 2, "new_value": 4},
            {"Prefer": "return=minimal"},
            "all",
        ),
        (
            "POST",
            f"/api/shards/{ns}log/commit",
            {"append": ["a"]},
            {"Idempotency-Key": f"{ns}k1"},
            "all",
        ),
        (
            "POST",
            f"/api/shards/{ns}log/commit",
            {"append": ["a"]},
            {"Idempotency-Key": f"{ns}k1"},
            "all",
        ),
        (
            "POST",
            f"/api/shards/{ns}log/commit",
            {"append": ["z"]},
            {"Idempotency-Key": f"{ns}k1"},
            "all",
        ),
        (
            "POST",
            f"/api/shards/{ns}log/commit",
            {"append": ["b"]},
            {"Prefer": "return=minimal"},
            "all",
        ),
        # A decision commit with a key, its replay, a key too long, and a key on
        # a refused call (nothing kept: the retry is refused again, not replayed).
        keyed(3, 5, f"{ns}k2"),
        keyed(3, 5, f"{ns}k2"),
        keyed(4, 6, "k" * 256),
        keyed(4, 6, f"{ns}k3", who="anonymous"),
        keyed(4, 6, f"{ns}k3", who="reader"),
        keyed(1, 6, f"{ns}k4"),
        keyed(1, 6, f"{ns}k4"),
        ("POST", f"/api/shards/{ns}log/commit", {"set": 1}, {}, "all"),
        ("POST", f"/api/shards/{ns}log/commit", [1, 2], {}, "all"),
        ("POST", f"/api/shards/{ns}log/commit", {"append": ["c"]}, {}, "badagent"),
        ("GET", f"/api/shards/{ns}c", None, {}, "badagent"),
        (
            "POST",
            f"/api/shards/{ns}q/claim",
            {"where": {"status": "pending"}, "set": {"status": "x"}},
            {},
            "all",
        ),
        (
            "POST",
            f"/api/shards/{ns}q/claim",
            {"where": {"status": "pending"}, "set": {"status": "x"}},
            {},
            "all",
        ),
        ("POST", f"/api/shards/{ns}q/claim", {"where": 3}, {}, "all"),
        (
            "POST",
            "/api/txn",
            {
                "compare": [{"shard_id": f"{ns}c", "version": 3}],
                "success": [{"op": "get", "shard_id": f"{ns}c"}],
                "failure": [],
            },
            {},
            "all",
        ),
        ("POST", "/api/txn", {"compare": "nope"}, {}, "all"),
        (
            "POST",
            "/api/txn",
            {"compare": [], "success": [{"op": "put", "shard_id": f"{ns}c", "value": 9}]},
            {"Prefer": "return=minimal", "Idempotency-Key": f"{ns}k5"},
            "all",
        ),
        (
            "POST",
            "/api/txn",
            {"compare": [], "success": [{"op": "put", "shard_id": f"{ns}c", "value": 9}]},
            {"Prefer": "return=minimal", "Idempotency-Key": f"{ns}k5"},
            "all",
        ),
        (
            "POST",
            "/api/txn",
            {"compare": [], "success": [{"op": "put", "shard_id": f"{ns}c", "value": 10}]},
            {},
            "reader",
        ),
        ("POST", f"/api/shards/{ns}q/claim", [1], {}, "all"),
        ("POST", f"/api/shards/{ns}q/claim", {"where": {}, "set": {}}, {}, "reader"),
        ("POST", "/api/leases", [1], {}, "all"),
        ("POST", "/api/leases", {"ttl_seconds": 30, "session": True}, {}, "all"),
        ("POST", "/api/leases", {"ttl_seconds": 30}, {}, "reader"),
        ("POST", "/api/leases", {"ttl_seconds": 30}, {}, "all"),
        ("POST", "/api/leases", {"ttl_seconds": 0}, {}, "all"),
        ("POST", "/api/leases/{lease}/keepalive", None, {}, "all"),
        ("DELETE", "/api/leases/{lease}", None, {}, "all"),
        ("DELETE", "/api/leases/{lease}", None, {}, "all"),
        ("POST", "/api/leases/{lease}/keepalive", None, {}, "all"),
        ("GET", f"/api/shards/{ns}c", None, {}, "revoked"),
        ("GET", f"/api/shards/{ns}c", None, {"Host": "elsewhere.example"}, "all"),
        ("GET", f"/api/shards/{ns}c", None, {}, "limited"),
        ("GET", f"/api/shards/{ns}c", None, {}, "limited"),  # past its one a minute
    ]


def test_hot_calls_answer_in_the_lane_exactly_as_the_full_application_does(monkeypatch):
    keys = {
        "all": api_key_create(name="all", permissions=["admin"])[1],
        "narrow": api_key_create(name="narrow", permissions=["admin"], shard_prefixes=["z."])[1],
        "reader": api_key_create(name="reader", permissions=["shard:read"])[1],
        "anonymous": api_key_create(name="anonymous", permissions=["admin"])[1],
    }
    keys["badagent"] = keys["all"]
    revoked, keys["revoked"] = api_key_create(name="revoked", permissions=["admin"])
    api_key_revoke(key=revoked, revoked_by="admin")
    full_app, lane_app = Recording(), Recording()
    went: list[tuple[str, str]] = []  # the lane's calls that went straight
    full, lane = PooledWsgiToAsgi(full_app, threads=2), PooledWsgiToAsgi(lane_app, threads=2)
    answers: dict[str, list[tuple[int, str, dict[str, str]]]] = {}
    for name, bridge, ns in (("full", full, "f."), ("lane", lane, "l.")):
        # Each run gets its own rate-limited key: the counter is per key.
        keys["limited"] = api_key_create(name=f"limited-{ns}", permissions=["admin"], rate_limit=1)[
            1
        ]
        with monkeypatch.context() as patch:
            if name == "full":
                patch.setattr(direct, "direct_view", lambda environ: None)
            else:
                patch.setattr(direct, "straight_answer", recorded(direct.straight_answer, went))
            answers[name] = []
            lease = ""  # the last lease granted, for the calls on it
            for method, path, body, extra, who in _script(ns):
                answer = _call(
                    bridge,
                    method,
                    path.replace("{lease}", lease),
                    body,
                    raw=keys[who],
                    agent={"anonymous": "", "badagent": "not an agent id!"}.get(who, "alice"),
                    extra=extra,
                )
                if path == "/api/leases" and answer[0] == 201:
                    lease = json.loads(answer[1])["lease_id"]
                answers[name].append(answer)
    for (method, path, *_), via_full, via_lane in zip(
        _script("?"), answers["full"], answers["lane"], strict=True
    ):
        assert (via_lane[0], _steady(via_lane[1], "l."), via_lane[2]) == (
            via_full[0],
            _steady(via_full[1], "f."),
            via_full[2],
        ), (method, path)
    statuses = {status for status, _, _ in answers["lane"]}
    assert {200, 201, 204, 400, 401, 403, 404, 409, 429} <= statuses
    # The lane answered every hot call itself; only creations and the one for a
    # host outside ALLOWED_HOSTS reached Django.
    assert lane_app.paths == ["/api/shards"] * 3 + ["/api/shards/l.c"]
    assert len(full_app.paths) == len(_script("f."))  # and the other run took none
    # Every hot call, with an Idempotency-Key or without, went straight to its
    # view's answer, past DRF's dispatch.
    straight = [
        (method, path.replace("{lease}", "L"))
        for method, path, _, extra, _ in _script("l.")
        if path != "/api/shards" and "Host" not in extra
    ]
    assert [(method, re.sub(r"lse_[0-9a-f]+", "L", path)) for method, path in went] == straight
    assert len(straight) == 47


def recorded(answer: Any, went: list[tuple[str, str]]) -> Any:
    """``straight_answer``, noting each call it answers in ``went``."""

    def recording(match: Any, request: Any, straight: Any) -> Any:
        went.append((request.method, request.path))
        return answer(match, request, straight)

    return recording


def test_the_lane_runs_every_middleware_of_the_api_and_passes_over_only_the_pages():
    assert direct.lane_middleware() == [
        "access.middleware.RateLimitMiddleware",
        "coordination.idempotency.IdempotencyMiddleware",
    ]
    assert set(direct.PASSED_OVER) <= set(settings.MIDDLEWARE)
