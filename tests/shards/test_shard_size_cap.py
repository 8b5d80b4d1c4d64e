"""The per-shard cap (ZEROLOCK_MAX_SHARD_BYTES): what the database holds of an
additive shard's Yjs document never passes it, whichever path writes."""

from __future__ import annotations

import pycrdt
import pytest

from access.identity import Actor
from common.errors import ApiError
from shards import crdt_store
from shards.models import CrdtUpdate, Shard
from shards.selectors import shard_get
from shards.services import additive_update_apply

pytestmark = pytest.mark.django_db

CAP = 8 * 1024


@pytest.fixture(autouse=True)
def _small_cap(settings):
    settings.ZEROLOCK_MAX_SHARD_BYTES = CAP


def stored_bytes(shard_id: str) -> int:
    """The snapshot and the updates logged after it, as the database holds them."""
    shard = Shard.objects.get(pk=shard_id)
    logged = CrdtUpdate.objects.filter(shard_id=shard_id, version__gt=shard.crdt_state_version)
    return len(bytes(shard.crdt_state)) + sum(len(bytes(u.update)) for u in logged)


def create(client, shard_id: str, crdt_type: str, initial=None):
    body = {"id": shard_id, "type": "additive", "crdt_type": crdt_type}
    if initial is not None:
        body["initial_value"] = initial
    return client.post("/api/shards", body, format="json")


def append(client, shard_id: str, items: list):
    return client.post(f"/api/shards/{shard_id}/commit", {"append": items}, format="json")


def fill(client, shard_id: str) -> int:
    """Appends 1 KB items until one more would not fit; returns the version."""
    create(client, shard_id, "array")
    version = 1
    while stored_bytes(shard_id) + 1200 < CAP:
        response = append(client, shard_id, ["x" * 1000])
        assert response.status_code == 200, response.json()
        version = response.json()["version"]
    return version


def too_large(response) -> dict:
    assert response.status_code == 413, response.json()
    error = response.json()["error"]
    assert (error["code"], error["limit_bytes"]) == ("SHARD_TOO_LARGE", CAP)
    return error


def test_a_rest_commit_that_would_pass_the_cap_is_refused_and_a_smaller_one_still_fits(planner):
    version = fill(planner, "full")
    before = (stored_bytes("full"), planner.get("/api/shards/full").json()["value"])

    too_large(append(planner, "full", ["y" * 2000]))
    shard = Shard.objects.get(pk="full")
    assert shard.version == version
    assert (stored_bytes("full"), planner.get("/api/shards/full").json()["value"]) == before

    assert append(planner, "full", ["small"]).json()["version"] == version + 1
    assert stored_bytes("full") <= CAP


def test_a_transaction_append_is_held_to_the_same_cap(planner):
    version = fill(planner, "events")
    body = {"success": [{"op": "append", "shard_id": "events", "items": ["z" * 2000]}]}
    too_large(planner.post("/api/txn", body, format="json"))
    assert Shard.objects.get(pk="events").version == version
    body["success"][0]["items"] = ["z"]
    assert planner.post("/api/txn", body, format="json").json()["versions"] == {
        "events": version + 1
    }


def test_a_yjs_update_is_held_to_the_same_cap_and_a_cold_process_counts_the_same(planner):
    version = fill(planner, "yjs")
    crdt_store.forget("yjs")  # the count is rebuilt from the database, as another process's
    client = pycrdt.Doc()
    client.apply_update(bytes(Shard.objects.get(pk="yjs").crdt_state))
    for update in CrdtUpdate.objects.filter(shard_id="yjs").order_by("version"):
        client.apply_update(bytes(update.update))
    root = client.get("value", type=pycrdt.Array)
    before = client.get_state()
    root.append("w" * 2000)
    with pytest.raises(ApiError) as refused:
        additive_update_apply(
            actor=Actor("editor"), shard=shard_get("yjs"), update=client.get_update(before)
        )
    assert (refused.value.status, refused.value.code) == (413, "SHARD_TOO_LARGE")
    assert Shard.objects.get(pk="yjs").version == version


def test_room_that_replaced_text_left_is_given_back_when_the_log_is_folded(planner):
    """The count holds every logged update; once it reaches the cap, the Doc is
    encoded, and what deleted text no longer takes is free again."""
    create(planner, "draft", "text", "a" * 3000)
    versions = []
    for n in range(6):  # each delta replaces the whole text: the Doc stays small
        delta = [{"delete": 3000}, {"insert": chr(ord("b") + n) * 3000}]
        response = planner.post("/api/shards/draft/commit", {"delta": delta}, format="json")
        assert response.status_code == 200, response.json()
        versions.append(response.json()["version"])
    shard = Shard.objects.get(pk="draft")
    assert shard.crdt_state_version > 1  # folded on the way, at the cap
    assert stored_bytes("draft") <= CAP
    assert planner.get("/api/shards/draft").json()["value"] == "g" * 3000


def test_an_initial_value_past_the_cap_is_refused(planner):
    too_large(create(planner, "big", "array", ["x" * 1000] * 10))
    assert not Shard.objects.filter(pk="big").exists()
