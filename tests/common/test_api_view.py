"""common.api.ApiView: DRF's answers, without rebuilding its policies per request."""

from __future__ import annotations

import pytest

from access.views import AuditListView
from shards.views import ShardDetailView
from supervision.views import HealthView

pytestmark = pytest.mark.django_db


@pytest.fixture
def reader(client_for, make_key):
    reader = client_for(make_key("shard:read", "shard:create", "shard:write"))
    reader.post("/api/shards", {"id": "n", "type": "decision", "initial_value": 1}, format="json")
    return reader


@pytest.mark.parametrize("accept", [None, "*/*", " */* ", "application/json", "application/*"])
def test_a_client_that_accepts_json_gets_json(reader, accept):
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    response = reader.get("/api/shards/n", **headers)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json()["value"] == 1


def test_a_client_that_accepts_only_something_else_gets_the_406_envelope(reader):
    response = reader.get("/api/shards/n", HTTP_ACCEPT="application/xml")
    assert response.status_code == 406
    assert response.json()["error"]["code"] == "NOT_ACCEPTABLE"


def test_the_schema_still_picks_its_renderer_by_format(client):
    as_json = client.get("/api/schema?format=json")
    assert as_json.status_code == 200 and as_json["Content-Type"].startswith(
        "application/vnd.oai.openapi+json"
    )
    assert client.get("/api/schema", HTTP_ACCEPT="*/*")["Content-Type"].startswith(
        "application/vnd.oai.openapi"
    )


def test_each_view_class_builds_its_own_policies_once():
    first, second = ShardDetailView(), ShardDetailView()
    assert first.get_authenticators() is second.get_authenticators()
    assert first.get_content_negotiator() is second.get_content_negotiator()
    # A view with other policies keeps its own (health needs no key).
    assert HealthView().get_authenticators() == [] != AuditListView().get_authenticators()
    assert HealthView().get_permissions() is not ShardDetailView().get_permissions()
