"""The operators' pages, second generation: natural order, paged history,
conflicts, tiles that agree with the charts, hot shards, empty states."""

from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from access.identity import Actor
from approvals.roles import groups_ensure
from dashboard.views import natural_key
from shards.models import Shard
from shards.services import shard_commit, shard_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer() -> Client:
    groups_ensure()
    user = User.objects.create_user("victor", password="pw")
    user.groups.add(Group.objects.get(name="Viewers"))
    client = Client()
    client.force_login(user)
    return client


def test_natural_key_orders_digit_runs_as_numbers():
    ids = ["lat.10", "lat.2", "lat.1", "lat.2.b", "alpha", "w9", "w10", "w100"]
    assert sorted(ids, key=natural_key) == [
        "alpha",
        "lat.1",
        "lat.2",
        "lat.2.b",
        "lat.10",
        "w9",
        "w10",
        "w100",
    ]


def test_the_shards_list_sorts_naturally(viewer):
    for shard_id in ["lat.10", "lat.2", "lat.1"]:
        shard_create(actor=Actor("a"), shard_id=shard_id, shard_type="decision", initial_value=0)
    html = viewer.get("/dashboard/shards").content.decode()
    order = re.findall(r'data-shard-id="(lat\.\d+)"', html)
    assert order == ["lat.1", "lat.2", "lat.10"]


def test_an_empty_install_says_what_to_do(viewer):
    html = viewer.get("/dashboard/shards").content.decode()
    assert "No shards yet" in html and "POST /api/shards" in html


def test_the_shard_page_pages_its_history_and_shows_recent_conflicts(viewer, planner):
    shard_create(actor=Actor("a"), shard_id="busy", shard_type="decision", initial_value=0)
    for version in range(1, 120):
        shard_commit(
            actor=Actor("a"),
            shard=Shard.objects.get(pk="busy"),
            expected_version=version,
            new_value=version,
        )
    stale = planner.post(
        "/api/shards/busy/commit", {"expected_version": 3, "new_value": -1}, format="json"
    )
    assert stale.status_code == 409
    first = viewer.get("/dashboard/shards/busy").content.decode()
    history = first.split('id="history"', 1)[1].split("</table>", 1)[0]
    assert history.count("<tr>") == 51  # the header and 50 versions
    assert "v120" in history and "v70" not in history
    assert "page 1 of 3" in first and "(120 versions)" in first
    last = viewer.get("/dashboard/shards/busy?page=3").content.decode()
    last_history = last.split('id="history"', 1)[1].split("</table>", 1)[0]
    assert ">v1<" in last_history and "v120" not in last_history
    conflicts = first.split('id="conflicts"', 1)[1].split("</table>", 1)[0]
    assert "STALE_VERSION" in conflicts and "planner-1" in conflicts and "v3" in conflicts


def test_a_shard_without_conflicts_says_so(viewer):
    shard_create(actor=Actor("a"), shard_id="calm", shard_type="decision", initial_value=0)
    assert (
        "No rejected commits on this shard" in viewer.get("/dashboard/shards/calm").content.decode()
    )


def test_the_tiles_are_computed_over_the_seconds_the_charts_draw(viewer, planner):
    planner.post(
        "/api/shards", {"id": "hot.1", "type": "decision", "initial_value": 0}, format="json"
    )
    planner.post(
        "/api/shards", {"id": "hot.2", "type": "decision", "initial_value": 0}, format="json"
    )
    for version in range(1, 6):
        planner.post(
            "/api/shards/hot.1/commit",
            {"expected_version": version, "new_value": version},
            format="json",
        )
    planner.post("/api/shards/hot.2/commit", {"expected_version": 1, "new_value": 1}, format="json")
    planner.post("/api/shards/hot.2/commit", {"expected_version": 1, "new_value": 2}, format="json")
    time.sleep(1.1)  # the charts end at the last whole second
    data = viewer.get("/dashboard/metrics.json").json()
    series, tiles = data["series"], data["tiles"]
    commits = sum(p["commits"] for p in series)
    conflicts = sum(p["conflicts"] for p in series)
    assert (commits, conflicts) == (6, 1)
    assert tiles["commits_per_second"] == round(commits / len(series), 3)
    assert tiles["conflicts_per_second"] == round(conflicts / len(series), 3)
    # Fewer than 100 samples: the minute's p99 is its slowest commit, which is
    # the highest per-second p99 the chart draws.
    assert tiles["p99"] == max(p["p99"] or 0 for p in series)
    assert tiles["hot"][0] == {"shard_id": "hot.1", "commits": 5, "conflicts": 0}
    assert tiles["hot"][1] == {"shard_id": "hot.2", "commits": 1, "conflicts": 1}
