"""Finding 6: scopes that hold on every backend. SQLite's ``LIKE`` ignores ASCII
case, so a key scoped to ``team-a:`` listed and watched ``TEAM-A:secret``, and
the approvals list had the same flaw. Every prefix match now goes through
shards/prefixes.py (GLOB on SQLite, LIKE on PostgreSQL, both case-sensitive);
these tests run unchanged on both databases."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from websockets.sync.client import connect

from access.identity import Actor
from access.services import api_key_create
from approvals.services import approval_request
from audit.models import AuditEntry
from shards.selectors import shard_get
from shards.services import shard_commit, shard_create

OWNER = Actor(agent_id="owner-b")


def _world() -> None:
    """Team B's secret, with a pending approval, next to team A's shard."""
    for shard_id in ("TEAM-A:secret", "Team-A:also-secret", "team-a:x"):
        shard_create(
            actor=OWNER,
            shard_id=shard_id,
            shard_type="decision",
            initial_value={"plan": shard_id},
            reversible=shard_id != "TEAM-A:secret",
        )
    approval_request(
        actor=OWNER,
        shard_id="TEAM-A:secret",
        proposed_value={"plan": "leak"},
        expected_version=1,
        description="team B's secret move",
    )


def _scoped_key(*permissions: str) -> str:
    _, raw = api_key_create(
        name="team a", permissions=list(permissions) or ["shard:read"], shard_prefixes=["team-a:"]
    )
    return raw


def _ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["results"]]


# --- lists, reads, approvals (in process, on the configured database) ---------


@pytest.mark.django_db
def test_a_key_scoped_to_team_a_lists_team_a_x_and_never_TEAM_A(client_for):
    _world()
    team_a = client_for(_scoped_key(), agent=None)
    assert _ids(team_a.get("/api/shards")) == ["team-a:x"]
    assert _ids(team_a.get("/api/shards", {"prefix": "team-a:"})) == ["team-a:x"]
    assert _ids(team_a.get("/api/shards", {"prefix": "TEAM-A:"})) == []
    assert _ids(team_a.get("/api/shards", {"prefix": "T"})) == []
    assert _ids(team_a.get("/api/shards", {"prefix": "team-A:"})) == []


@pytest.mark.django_db
def test_a_key_scoped_to_team_a_cannot_read_or_commit_TEAM_A(client_for):
    _world()
    team_a = client_for(_scoped_key("shard:read", "shard:write"), agent="agent-a")
    assert team_a.get("/api/shards/team-a:x").status_code == 200
    for path in ("/api/shards/TEAM-A:secret", "/api/shards/TEAM-A:secret/history"):
        refused = team_a.get(path)
        assert refused.status_code == 403, path
        assert refused.json()["error"]["code"] == "PERMISSION_DENIED"
        assert "plan" not in refused.content.decode()
    commit = team_a.post(
        "/api/shards/TEAM-A:secret/commit",
        {"expected_version": 1, "new_value": {"plan": "mine"}},
        format="json",
    )
    assert commit.status_code == 403
    assert shard_get("TEAM-A:secret").value == {"plan": "TEAM-A:secret"}


@pytest.mark.django_db
def test_a_key_scoped_to_team_a_does_not_see_approvals_on_TEAM_A(client_for, make_key):
    _world()
    team_a = client_for(_scoped_key(), agent=None)
    admin = client_for(make_key("admin"), agent=None)
    everything = admin.get("/api/approvals").json()["results"]
    assert [a["shard_id"] for a in everything] == ["TEAM-A:secret"]
    listed = team_a.get("/api/approvals")
    assert listed.status_code == 200
    assert listed.json()["results"] == []
    assert team_a.get("/api/approvals", {"status": "pending"}).json()["results"] == []
    one = team_a.get(f"/api/approvals/{everything[0]['id']}")
    assert one.status_code == 403
    assert "leak" not in one.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("team_", ["team_a:y"]),  # LIKE's "_" would also match team-a:x
        ("team_a:", ["team_a:y"]),
        ("team%", []),  # LIKE's "%"
        ("%", []),
        ("_", []),
        ("team-a:*", []),  # GLOB's "*"
        ("*", []),
        ("team-a:?", []),  # GLOB's "?"
        ("team?a", []),
        ("team-a:[x]", []),  # GLOB's character class
        ("team[-_]a", []),
        ("team-a:[", []),  # an unclosed class is an error in neither
        ("team-a:]", []),
        ("team-a:\\", []),  # LIKE's escape character
        ("team-a:", ["team-a:x", "team-a:xyz"]),
    ],
)
def test_wildcards_in_a_prefix_filter_are_taken_literally(client_for, make_key, prefix, expected):
    for shard_id in ("team-a:x", "team-a:xyz", "team_a:y", "teamXa:z"):
        shard_create(actor=OWNER, shard_id=shard_id, shard_type="decision", initial_value=0)
    admin = client_for(make_key("admin"), agent=None)
    assert _ids(admin.get("/api/shards", {"prefix": prefix})) == expected


@pytest.mark.django_db
def test_a_key_scoped_with_an_underscore_is_not_a_wildcard_scope(client_for):
    for shard_id in ("team-a:x", "team_a:y", "teamXa:z"):
        shard_create(actor=OWNER, shard_id=shard_id, shard_type="decision", initial_value=0)
    _, raw = api_key_create(
        name="underscored", permissions=["shard:read"], shard_prefixes=["team_"]
    )
    scoped = client_for(raw, agent=None)
    assert _ids(scoped.get("/api/shards")) == ["team_a:y"]
    assert scoped.get("/api/shards/teamXa:z").status_code == 403


# --- watch, over real sockets: SSE and the agents' WebSocket ------------------


def _changes_after_world() -> int:
    """Builds the world after a known revision; returns that revision. The last
    change is team A's, so a watcher that sees it has been shown everything the
    server would ever show it from the earlier ones."""
    shard_create(actor=OWNER, shard_id="marker", shard_type="decision", initial_value=0)
    since = AuditEntry.objects.order_by("-id").values_list("id", flat=True).first()
    _world()
    shard_commit(
        actor=OWNER, shard=shard_get("Team-A:also-secret"), expected_version=1, new_value={"v": 2}
    )
    shard_commit(actor=OWNER, shard=shard_get("team-a:x"), expected_version=1, new_value="last")
    return since


def _sse_events(url: str, raw: str, prefix: str, since: int, until_value: str) -> list[dict]:
    seen: list[dict] = []
    with (
        httpx.Client(headers={"X-API-Key": raw}, timeout=15) as client,
        client.stream(
            "GET", f"{url}/api/watch", params={"prefix": prefix, "since": since}
        ) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
                if seen[-1]["value"] == until_value:
                    return seen
    raise AssertionError(f"the stream ended before {until_value!r}: {seen}")


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_team_a_sse_watch_never_streams_TEAM_A(live_server_url):
    since = _changes_after_world()
    raw = _scoped_key()
    events = _sse_events(live_server_url, raw, "team-a:", since, until_value="last")
    assert {e["shard_id"] for e in events} == {"team-a:x"}
    for prefix in ("TEAM-A:", "", "T", "team"):
        refused = httpx.get(
            f"{live_server_url}/api/watch",
            params={"prefix": prefix, "since": since},
            headers={"X-API-Key": raw},
        )
        assert refused.status_code == 403, prefix
        assert refused.json()["error"]["code"] == "PERMISSION_DENIED"


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_team_a_websocket_watch_and_subscribe_never_reach_TEAM_A(live_server_url):
    since = _changes_after_world()
    raw = _scoped_key()
    ws_url = live_server_url.replace("http://", "ws://") + "/ws/agents/"
    with connect(ws_url, additional_headers={"X-API-Key": raw, "X-Agent-Id": "agent-a"}) as ws:

        def ask(message: dict) -> dict:
            ws.send(json.dumps(message))
            return json.loads(ws.recv(timeout=10))

        for prefix in ("TEAM-A:", "", "T"):
            refused = ask({"type": "watch", "prefix": prefix, "since": since})
            assert (refused["type"], refused["code"]) == ("error", "PERMISSION_DENIED"), prefix
        refused = ask({"type": "subscribe", "shard_ids": ["TEAM-A:secret"]})
        assert (refused["type"], refused["code"]) == ("error", "PERMISSION_DENIED")

        assert ask({"type": "watch", "prefix": "team-a:", "since": since})["type"] == "watching"
        events: list[dict] = []
        deadline = time.monotonic() + 15
        while not events or events[-1]["value"] != "last":
            assert time.monotonic() < deadline, events
            events.append(json.loads(ws.recv(timeout=10)))
    assert {e["type"] for e in events} == {"watch_event"}
    assert {e["shard_id"] for e in events} == {"team-a:x"}


def test_a_scoped_admin_key_reads_only_its_own_shards_in_the_audit_log(make_key, client_for):
    """/api/audit is admin-only, but an admin key scoped to team-a: is still scoped."""
    root = client_for(make_key("admin"), agent="root")
    for shard_id in ("team-a:x", "TEAM-A:secret", "team-b:y"):
        assert (
            root.post(
                "/api/shards",
                {"id": shard_id, "type": "decision", "initial_value": 1},
                format="json",
            ).status_code
            == 201
        )
    scoped = client_for(make_key("admin", shard_prefixes=["team-a:"]), agent="scoped-admin")
    response = scoped.get("/api/audit")
    assert response.status_code == 200
    seen = {entry["shard_id"] for entry in response.json()}
    assert seen == {"team-a:x"}
    assert scoped.get("/api/audit", {"shard_id": "TEAM-A:secret"}).json() == []
    everything = {entry["shard_id"] for entry in root.get("/api/audit").json()}
    assert {"team-a:x", "TEAM-A:secret", "team-b:y"} <= everything
