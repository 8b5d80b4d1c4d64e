"""The operators' pages: who may see them and what they show."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from access.identity import Actor
from approvals.roles import groups_ensure
from approvals.services import approval_request
from shards.models import Shard
from shards.services import shard_commit, shard_create

pytestmark = pytest.mark.django_db


def signed_in(username: str, *, group: str | None = None, staff: bool = False) -> Client:
    groups_ensure()
    user = User.objects.create_user(username, password="pw-pw-pw-pw", is_staff=staff)
    if group:
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def plan() -> Shard:
    shard_create(
        actor=Actor("a"),
        shard_id="ops.plan",
        shard_type="decision",
        initial_value={"step": 1, "owner": "ann"},
    )
    shard_create(actor=Actor("a"), shard_id="ops.log", shard_type="additive", crdt_type="array")
    shard_create(actor=Actor("a"), shard_id="misc", shard_type="decision", initial_value=0)
    shard = Shard.objects.get(pk="ops.plan")
    shard_commit(
        actor=Actor("bo"), shard=shard, expected_version=1, new_value={"step": 2, "owner": "ann"}
    )
    return shard


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/shards",
        "/dashboard/shards/ops.plan",
        "/dashboard/metrics",
        "/dashboard/metrics.json",
        "/dashboard/agents",
        "/dashboard/agent-rows",
    ],
)
def test_pages_need_a_login_and_the_view_permission(plan, path):
    assert Client().get(path).status_code == 302
    assert signed_in("olga").get(path).status_code == 403
    assert signed_in("victor", group="Viewers").get(path).status_code == 200
    assert signed_in("stan", staff=True).get(path).status_code == 200


def test_the_shards_page_lists_type_version_and_last_writer_and_filters(plan):
    client = signed_in("victor", group="Viewers")
    html = client.get("/dashboard/shards").content.decode()
    assert 'data-shard-id="ops.plan"' in html and "v2" in html and "bo" in html
    assert 'data-shard-id="misc"' in html
    by_prefix = client.get("/dashboard/shards?prefix=ops.").content.decode()
    assert 'data-shard-id="misc"' not in by_prefix and 'data-shard-id="ops.log"' in by_prefix
    by_type = client.get("/dashboard/shard-rows?type=additive").content.decode()
    assert 'data-shard-id="ops.log"' in by_type and 'data-shard-id="ops.plan"' not in by_type


def test_a_shard_page_shows_value_history_diff_and_pending_approvals(plan):
    Shard.objects.filter(pk="ops.plan").update(reversible=False)
    approval_request(
        actor=Actor("bo"),
        shard_id="ops.plan",
        proposed_value={"step": 3},
        expected_version=2,
        description="Skip ahead",
    )
    client = signed_in("victor", group="Viewers")
    html = client.get("/dashboard/shards/ops.plan?a=1&b=2").content.decode()
    assert "&quot;step&quot;: 2" in html  # the pretty value
    assert "v1" in html and "v2" in html and "bo" in html  # history
    assert 'id="version-diff"' in html and 'class="line del"' in html and 'class="line add"' in html
    assert "Skip ahead" in html
    assert 'id="subscribers">0<' in html
    assert client.get("/dashboard/shards/nowhere").status_code == 404


def test_the_metrics_data_has_a_minute_of_seconds(plan):
    data = signed_in("victor", group="Viewers").get("/dashboard/metrics.json").json()
    assert len(data["series"]) == 60
    assert set(data["ws"]) >= {"messages_sent", "naive_broadcast_messages", "connections"}
    assert "pending" in data["approvals"]
