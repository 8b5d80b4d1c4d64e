"""GET /api/approvals pages by keyset, newest first: ``next`` continues after the
last approval a page held, so a walk sees each approval once even while new ones
arrive. ``page=`` still works, deprecated (RFC 9745 ``Deprecation`` and a
``Link`` to the same page in the keyset form)."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from access.identity import Actor
from access.services import api_key_create
from approvals.models import Approval
from approvals.selectors import cursor_of
from approvals.services import approval_request
from shards.services import shard_create
from tests.approvals.conftest import Agent

DEPRECATED_SINCE = "@1796169600"  # 2026-12-02, approvals/views.py PAGE_DEPRECATED_AT


def asked(count: int, *, shard_id: str = "ledger", value: object = 2) -> list[str]:
    """``count`` approvals on ``shard_id``, newest first. Each ten share one
    created_at, as requests made in the same microsecond would: ids break the tie."""
    shard_create(actor=Actor("keeper"), shard_id=shard_id, shard_type="decision", initial_value=1)
    ids = [
        approval_request(
            actor=Actor("asker"),
            shard_id=shard_id,
            proposed_value=value,
            expected_version=1,
            description=f"request {n}",
        ).id
        for n in range(count)
    ]
    start = timezone.now() - timedelta(hours=1)
    for tenth in range(0, count, 10):
        Approval.objects.filter(pk__in=ids[tenth : tenth + 10]).update(
            created_at=start + timedelta(seconds=tenth)
        )
    rows = Approval.objects.filter(pk__in=ids).values_list("created_at", "id")
    return [approval_id for _, approval_id in sorted(rows, reverse=True)]


def path_of(url: str) -> str:
    """An absolute ``next`` as a path for the client that got it."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def ids_of(response) -> list[str]:
    return [a["id"] for a in response.json()["results"]]


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_walk_by_next_sees_each_of_250_approvals_once_newest_first_while_new_ones_arrive(
    live_server_url,
):
    expected = asked(250)
    _, key = api_key_create(name="reader", permissions=["shard:read"])
    reader = httpx.Client(
        base_url=live_server_url, headers={"X-API-Key": key, "X-Agent-Id": "reader"}, timeout=30
    )
    asker = Agent(live_server_url, "late", ["shard:read", "approval:request"])
    seen: list[str] = []
    arrived: list[str] = []
    url: str | None = "/api/approvals?limit=40"
    while url:
        page = reader.get(url)
        assert page.status_code == 200, page.text
        assert "Deprecation" not in page.headers
        seen += ids_of(page)
        # New requests arrive between every two pages, newer than all the walk has left.
        arrived += [asker.request("ledger", n, f"late {n}") for n in range(3)]
        url = page.json()["next"]
        assert url is None or url.startswith(f"{live_server_url}/api/approvals?")
    assert seen == expected  # each once, newest first, none of the late ones
    assert len(arrived) == 21  # 7 pages
    assert ids_of(reader.get("/api/approvals?limit=21")) == arrived[::-1]


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_page_numbers_are_still_offsets_so_a_walk_by_them_sees_some_twice_as_new_ones_arrive(
    live_server_url,
):
    """Why page= is deprecated: each arrival shifts every page after it by one."""
    expected = asked(60)
    _, key = api_key_create(name="reader", permissions=["shard:read"])
    reader = httpx.Client(
        base_url=live_server_url, headers={"X-API-Key": key, "X-Agent-Id": "reader"}, timeout=30
    )
    asker = Agent(live_server_url, "late", ["shard:read", "approval:request"])
    seen: list[str] = []
    for number in range(1, 4):
        page = reader.get(f"/api/approvals?limit=20&page={number}")
        assert page.headers["Deprecation"] == DEPRECATED_SINCE
        seen += ids_of(page)
        if number < 3:
            asker.request("ledger", number, "late")
    assert seen[:20] == expected[:20]
    # Each arrival pushed one approval back onto the next page: seen twice...
    assert [expected.index(i) for i in seen if seen.count(i) > 1] == [19, 19, 38, 38]
    # ...and as many of the oldest never seen.
    assert set(expected) - set(seen) == set(expected[-2:])


@pytest.fixture
def reader(make_key, client_for):
    return client_for(make_key("shard:read"), agent="reader")


@pytest.mark.django_db
def test_a_page_number_answer_is_marked_deprecated_and_links_the_same_page_in_the_keyset_form(
    reader,
):
    expected = asked(120)
    page = reader.get("/api/approvals?limit=50&page=2&shard_id=ledger")
    assert page.status_code == 200
    assert ids_of(page) == expected[50:100]
    assert page["Deprecation"] == DEPRECATED_SINCE
    link, rel = page["Link"].split("; ")
    assert rel == 'rel="successor-version"'
    successor = link.strip("<>")
    assert parse_qs(urlsplit(successor).query) == {
        "limit": ["50"],
        "shard_id": ["ledger"],
        "after": [
            cursor_of(*Approval.objects.values_list("created_at", "id").get(pk=expected[49]))
        ],
    }
    same = reader.get(path_of(successor))
    assert ids_of(same) == expected[50:100] and "Deprecation" not in same
    # next is the keyset form too: a client that follows it leaves page= behind.
    assert same.json()["next"] == page.json()["next"]
    assert "page" not in parse_qs(urlsplit(page.json()["next"]).query)
    rest = reader.get(path_of(page.json()["next"]))
    assert (ids_of(rest), rest.json()["next"]) == (expected[100:], None)


@pytest.mark.django_db
def test_the_first_and_a_past_the_end_page_link_keyset_pages_that_hold_the_same(reader):
    expected = asked(30)
    first = reader.get("/api/approvals?page=1&limit=20")
    assert first["Deprecation"] == DEPRECATED_SINCE
    successor = path_of(first["Link"].split(";")[0].strip("<>"))
    assert successor == "/api/approvals?limit=20"
    assert ids_of(first) == ids_of(reader.get(successor)) == expected[:20]
    beyond = reader.get("/api/approvals?page=9&limit=20")
    assert (ids_of(beyond), beyond.json()["next"]) == ([], None)
    successor = path_of(beyond["Link"].split(";")[0].strip("<>"))
    assert ids_of(reader.get(successor)) == []


@pytest.mark.django_db
def test_after_beside_page_is_the_keyset_form_and_page_is_ignored(reader):
    expected = asked(30)
    first = reader.get("/api/approvals?limit=10").json()
    both = reader.get(path_of(first["next"]) + "&page=3")
    assert ids_of(both) == expected[10:20]
    assert "Deprecation" not in both and "Link" not in both


@pytest.mark.django_db
@pytest.mark.parametrize(
    "cursor",
    ["", "abc", "12", "12.", ".apr_1", "-1.apr_1", "12.apr 1", "12.apr_1\n", "1" * 19 + ".apr_1"],
)
def test_a_cursor_that_is_not_one_is_a_400_naming_after(reader, cursor):
    asked(1)
    response = reader.get("/api/approvals", {"after": cursor})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], list(error["fields"])) == ("VALIDATION_ERROR", ["after"])


@pytest.mark.django_db
def test_a_cursor_past_the_year_9999_is_the_end_of_time_and_everything_is_older(reader):
    expected = asked(12)
    response = reader.get("/api/approvals", {"after": "9" * 18 + ".zzz"})
    assert ids_of(response) == expected


@pytest.mark.django_db
def test_a_page_stops_before_the_byte_cap_and_next_carries_on(reader, settings):
    settings.ZEROLOCK_LIST_MAX_BYTES = 64 * 1024
    expected = asked(40, value={"memo": "x" * 6000})  # about 13 KB of JSON per approval
    seen, sizes, url = [], [], "/api/approvals?limit=500"
    while url:
        page = reader.get(url)
        sizes.append(len(page.content))
        seen += ids_of(page)
        url = page.json()["next"] and path_of(page.json()["next"])
    assert seen == expected
    assert len(sizes) > 5 and max(sizes) <= 64 * 1024 + 1024


@pytest.mark.django_db
def test_a_list_shows_each_shards_version_now_and_whether_the_request_is_stale(
    reader, make_key, client_for
):
    [waiting] = asked(1, shard_id="calm")
    [drifted] = asked(1, shard_id="busy")
    writer = client_for(make_key("shard:write", agents=["keeper"]), agent="keeper")
    commit = {"expected_version": 1, "new_value": 5}
    assert writer.post("/api/shards/busy/commit", commit, format="json").status_code == 200
    listed = {a["id"]: a for a in reader.get("/api/approvals").json()["results"]}
    assert (listed[waiting]["current_version"], listed[waiting]["stale"]) == (1, False)
    assert (listed[drifted]["current_version"], listed[drifted]["stale"]) == (2, True)
    # A list still never computes a diff: the stored one, from the version asked at.
    assert (listed[drifted]["diff_version"], listed[drifted]["diff"]) == (
        1,
        [{"op": "replace", "path": "", "value": 2}],
    )


@pytest.mark.django_db
def test_a_page_costs_the_same_few_statements_however_many_approvals_and_decisions_it_holds(
    reader, make_key, client_for
):
    expected = asked(60)
    officer = client_for(make_key("shard:read", "approval:decide"), agent="officer")
    for approval_id in expected[::3]:
        reason = {"reason": "no"}
        rejected = officer.post(f"/api/approvals/{approval_id}/reject", reason, format="json")
        assert rejected.status_code == 200, rejected.content
    counts = {}
    for limit in (2, 50):
        reader.get(f"/api/approvals?limit={limit}")  # the key is then cached
        with CaptureQueriesContext(connection) as queries:
            page = reader.get(f"/api/approvals?limit={limit}")
        assert len(ids_of(page)) == limit
        # Not the page's: a process re-reads a cached key after 0.5 s and the soonest
        # lease expiry after 0.25 s, on whichever request comes next (a slow machine
        # made the measured request pay for one).
        counts[limit] = sum(
            "hashed_key" not in q["sql"] and "shards_lease" not in q["sql"]
            for q in queries.captured_queries
        )
    assert counts[2] == counts[50] <= 4, counts
    rejected = {a["id"]: a for a in page.json()["results"]}[expected[0]]
    assert [d["reason"] for d in rejected["decisions"]] == ["no"]
