"""A transaction's answer is bounded like a list page: gets past the byte cap
carry a marker instead of their value, and memory is given back."""

from __future__ import annotations

import threading

import httpx
import pytest

from access.identity import Actor
from access.services import api_key_create
from shards.services import shard_create
from tests.conftest import server_env, start_server, stop_server
from tests.site.rawhttp import rss_mb

pytestmark = pytest.mark.django_db(transaction=True)

BIG = {"blob": "x" * 900_000}  # 900 KB
HUNDRED_GETS = {"success": [{"op": "get", "shard_id": "big"} for _ in range(100)]}


def test_gets_past_the_byte_cap_carry_a_marker_and_the_first_goes_out_whole(admin, settings):
    settings.ZEROLOCK_LIST_MAX_BYTES = 2_000_000
    shard_create(actor=Actor("w"), shard_id="big", shard_type="decision", initial_value=BIG)
    shard_create(actor=Actor("w"), shard_id="small", shard_type="decision", initial_value=1)
    body = {
        "success": [
            {"op": "get", "shard_id": "big"},
            {"op": "get", "shard_id": "big", "path": ["blob"]},
            {"op": "get", "shard_id": "big"},  # past 2 MB from here
            {"op": "get", "shard_id": "small"},
            {"op": "get", "shard_id": "big", "path": ["missing"]},
        ]
    }
    answer = admin.post("/api/txn", body, format="json")
    assert answer.status_code == 200, answer.content[:300]
    gets = answer.json()["responses"]
    assert gets[0]["value"] == BIG and gets[1]["value"] == BIG["blob"]
    assert "value_omitted" not in gets[0] and "value_omitted" not in gets[1]
    for omitted in gets[2:4]:
        assert (omitted["found"], omitted["value"], omitted["value_omitted"]) == (True, None, True)
    assert gets[4] == {"op": "get", "shard_id": "big", "path": ["missing"], "found": False,
                       "value": None, "version": 1}  # fmt: skip
    settings.ZEROLOCK_LIST_MAX_BYTES = 500_000
    alone = admin.post("/api/txn", {"success": [{"op": "get", "shard_id": "big"}]}, format="json")
    assert alone.json()["responses"][0]["value"] == BIG  # larger than the cap, but alone


@pytest.mark.live
@pytest.mark.heavy
def test_eight_parallel_transactions_of_a_hundred_big_gets_stay_small_and_give_memory_back():
    shard_create(actor=Actor("w"), shard_id="big", shard_type="decision", initial_value=BIG)
    _, raw = api_key_create(name="reader", permissions=["shard:read"])
    proc, base = start_server(server_env())
    sizes: list[int] = []
    try:
        with httpx.Client(
            base_url=base, headers={"X-API-Key": raw, "X-Agent-Id": "reader"}, timeout=120
        ) as warm:
            warmed = warm.post("/api/txn", json=HUNDRED_GETS)
            assert warmed.status_code == 200, warmed.text[:300]
        before = rss_mb(proc.pid)

        def ask() -> None:
            with httpx.Client(
                base_url=base, headers={"X-API-Key": raw, "X-Agent-Id": "reader"}, timeout=120
            ) as c:
                for _ in range(3):
                    answer = c.post("/api/txn", json=HUNDRED_GETS)
                    assert answer.status_code == 200
                    sizes.append(len(answer.content))

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        after = rss_mb(proc.pid)
    finally:
        stop_server(proc)
    print(f"RSS before {before:.0f} MB, after {after:.0f} MB; answers {max(sizes)} bytes")
    assert len(sizes) == 24
    assert max(sizes) < 5 * 1024 * 1024  # the 4 MiB cap and one value; 90 MB before
    assert after - before < 150, (before, after)  # +629 MB before (226 to 855 MB)
