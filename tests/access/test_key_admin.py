"""Admins manage API keys in Django admin: the raw key is shown once, revoking works."""

import re

import pytest

from access.keys import hash_secret
from access.models import ApiKey
from audit.models import AuditEntry

pytestmark = pytest.mark.django_db


def add_key(admin_client, **overrides):
    form = {
        "name": "crew-key",
        "permissions": ["shard:read", "shard:create"],
        "agent_ids": "crew-1, crew-2",
        "shard_prefixes": "crew.",
        "rate_limit": "",
        "expires_at_0": "",
        "expires_at_1": "",
        **overrides,
    }
    # The add redirects (POST-redirect-GET) to the page that shows the key once.
    return admin_client.post("/admin/access/apikey/add/", form, follow=True)


def test_an_admin_creates_a_key_and_sees_the_raw_key_once(admin_client, client_for):
    page = add_key(admin_client)
    assert page.status_code == 200
    raw = re.search(r'value="(zl_[^"]+)"', page.content.decode()).group(1)
    key = ApiKey.objects.get(name="crew-key")
    assert key.hashed_key == hash_secret(raw.split(".", 1)[1])
    assert key.agent_ids == ["crew-1", "crew-2"] and key.shard_prefixes == ["crew."]
    assert client_for(raw, agent="crew-1").get("/api/shards").status_code == 200
    change_page = admin_client.get(f"/admin/access/apikey/{key.pk}/change/").content.decode()
    assert raw not in change_page and raw.split(".", 1)[1] not in change_page
    assert AuditEntry.objects.filter(action="key.create", key_prefix=key.prefix).exists()


def test_revoking_in_admin_makes_the_key_unauthenticated_and_is_audited(admin_client, client_for):
    raw = re.search(r'value="(zl_[^"]+)"', add_key(admin_client).content.decode()).group(1)
    key = ApiKey.objects.get(name="crew-key")
    response = admin_client.post(
        "/admin/access/apikey/", {"action": "revoke", "_selected_action": [key.pk]}
    )
    assert response.status_code == 302
    refused = client_for(raw, agent="crew-1").get("/api/shards")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "KEY_REVOKED"
    revoke = AuditEntry.objects.get(action="key.revoke", key_prefix=key.prefix)
    assert revoke.agent_id == "admin:admin"


def test_changing_permissions_in_admin_is_audited(admin_client):
    add_key(admin_client)
    key = ApiKey.objects.get(name="crew-key")
    form = {
        "name": "crew-key",
        "permissions": ["shard:read"],
        "agent_ids": "crew-1, crew-2",
        "shard_prefixes": "crew.",
        "rate_limit": "50",
        "expires_at_0": "",
        "expires_at_1": "",
    }
    assert admin_client.post(f"/admin/access/apikey/{key.pk}/change/", form).status_code == 302
    key.refresh_from_db()
    assert key.permissions == ["shard:read"] and key.rate_limit == 50
    change = AuditEntry.objects.get(action="key.change", key_prefix=key.prefix)
    assert set(change.details["changes"]) == {"permissions", "rate_limit"}


def test_the_key_list_filters_by_permission_and_keys_cannot_be_deleted(admin_client):
    add_key(admin_client, name="reader", permissions=["shard:read"])
    add_key(admin_client, name="decider", permissions=["approval:decide"])
    listing = admin_client.get("/admin/access/apikey/?permission=approval:decide").content.decode()
    assert "decider" in listing and "reader" not in listing
    key = ApiKey.objects.get(name="reader")
    assert admin_client.get(f"/admin/access/apikey/{key.pk}/delete/").status_code == 403


def test_an_unknown_permission_cannot_be_granted_in_admin(admin_client):
    page = add_key(admin_client, permissions=["shard:fly"])
    assert page.status_code == 200
    assert not ApiKey.objects.filter(name="crew-key").exists()
    assert "Select a valid choice" in page.content.decode()


def test_shards_are_read_only_in_admin_with_a_pretty_value(admin_client, planner):
    planner.post(
        "/api/shards",
        {"id": "cfg", "type": "decision", "initial_value": {"a": [1, 2]}},
        format="json",
    )
    page = admin_client.get("/admin/shards/shard/cfg/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<pre>{\n  &quot;a&quot;: [" in html and 'name="_save"' not in html
    assert admin_client.get("/admin/shards/shard/add/").status_code == 403
    assert admin_client.post("/admin/shards/shard/cfg/delete/", {"post": "yes"}).status_code == 403
