"""A server process trusts a key it has looked up for at most
ZEROLOCK_KEY_CACHE_SECONDS (0.5 s): busy agents do not pay a key query per
request, and a key revoked or narrowed anywhere (the admin, another process,
SQL) is refused by every process within a second."""

from __future__ import annotations

import time

import httpx
import pytest
from django.conf import settings

from access.models import ApiKey
from access.services import api_key_create, api_key_revoke

# Past the cache time, with room for the request's own way there and back.
TRUST_WINDOW = settings.ZEROLOCK_KEY_CACHE_SECONDS + 0.1


def _agent(url: str, raw: str, agent: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"X-API-Key": raw, "X-Agent-Id": agent}, timeout=30)


def _shard(url: str, shard_id: str) -> None:
    _, admin = api_key_create(name="setup", permissions=["admin"])
    with _agent(url, admin, "setup") as setup:
        created = setup.post("/api/shards", json={"id": shard_id, "type": "decision"})
        assert created.status_code == 201, created.text


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_key_revoked_behind_the_servers_back_is_refused_within_a_second(live_server_url):
    _shard(live_server_url, "cache.plan")
    key, raw = api_key_create(name="mallory", permissions=["shard:read"])
    with _agent(live_server_url, raw, "mallory") as mallory:
        for _ in range(5):  # the server now holds the key
            assert mallory.get("/api/shards/cache.plan").status_code == 200
        # Not through the service: as SQL, or another process, would do it.
        ApiKey.objects.filter(pk=key.pk).update(revoked=True)
        revoked_at = time.monotonic()
        time.sleep(max(0.0, revoked_at + TRUST_WINDOW - time.monotonic()))
        refused = mallory.get("/api/shards/cache.plan")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "KEY_REVOKED"


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_key_narrowed_behind_the_servers_back_loses_the_permission_within_a_second(
    live_server_url,
):
    _shard(live_server_url, "cache.rota")
    key, raw = api_key_create(name="worker", permissions=["shard:read", "shard:write"])
    with _agent(live_server_url, raw, "worker") as worker:
        wrote = worker.post(
            "/api/shards/cache.rota/commit", json={"expected_version": 1, "new_value": 1}
        )
        assert wrote.status_code == 200, wrote.text
        ApiKey.objects.filter(pk=key.pk).update(permissions=["shard:read"])
        time.sleep(TRUST_WINDOW)
        refused = worker.post(
            "/api/shards/cache.rota/commit", json={"expected_version": 2, "new_value": 2}
        )
        assert refused.status_code == 403, refused.text
        assert worker.get("/api/shards/cache.rota").status_code == 200


@pytest.mark.django_db
def test_a_key_revoked_or_changed_in_this_process_is_seen_at_once(client_for):
    """The admin page and the services run in the server's own process: their
    saves drop the held key there, with no wait at all."""
    key, raw = api_key_create(name="eve", permissions=["shard:read", "shard:create"])
    eve = client_for(raw, agent="eve")
    assert eve.get("/api/shards").status_code == 200  # held now
    key.permissions = ["shard:read"]
    key.save()  # as the key admin page saves it
    assert (
        eve.post("/api/shards", {"id": "x", "type": "decision"}, format="json").status_code == 403
    )
    api_key_revoke(key=key, revoked_by="admin")
    assert eve.get("/api/shards").json()["error"]["code"] == "KEY_REVOKED"
