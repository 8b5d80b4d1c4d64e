"""Every failure under /api/ is the contract's JSON envelope with a 4xx, never
HTML and never a 500 for bad input."""

from datetime import timedelta

import pytest
from django.utils import timezone

from access.models import ApiKey
from audit.models import AuditEntry

pytestmark = pytest.mark.django_db


def assert_envelope(response, status, code):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    return error


def test_a_request_with_no_key_is_unauthenticated(client_for):
    response = client_for(None).get("/api/shards")
    assert_envelope(response, 401, "UNAUTHENTICATED")
    assert response["WWW-Authenticate"] == "X-API-Key"


def test_a_wrong_key_is_unauthenticated_and_the_failure_is_audited(make_key, client_for):
    raw = make_key("shard:read")
    prefix = raw.split(".")[0].removeprefix("zl_")
    response = client_for(raw[:-3] + "xyz").get("/api/shards")
    assert_envelope(response, 401, "UNAUTHENTICATED")
    failure = AuditEntry.objects.get(action="auth.failure")
    assert failure.key_prefix == prefix
    assert raw.split(".")[1] not in str(failure.details)


def test_a_garbage_key_is_unauthenticated(client_for):
    assert_envelope(client_for("not-a-key").get("/api/shards"), 401, "UNAUTHENTICATED")


def test_a_revoked_key_is_refused_saying_so(make_key, client_for):
    raw = make_key("shard:read")
    ApiKey.objects.update(revoked=True)
    assert_envelope(client_for(raw).get("/api/shards"), 401, "KEY_REVOKED")


def test_an_expired_key_is_refused_saying_so(make_key, client_for):
    raw = make_key("shard:read", expires_at=timezone.now() + timedelta(minutes=5))
    ApiKey.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert_envelope(client_for(raw).get("/api/shards"), 401, "KEY_EXPIRED")


def test_a_key_with_no_access_is_denied_naming_the_permission(make_key, client_for):
    reader = client_for(make_key("shard:read"))
    error = assert_envelope(
        reader.post("/api/shards", {"id": "x", "type": "decision"}, format="json"),
        403,
        "PERMISSION_DENIED",
    )
    assert error["permission"] == "shard:create"
    assert_envelope(reader.get("/api/audit"), 403, "PERMISSION_DENIED")


def test_a_write_without_an_agent_id_is_refused(make_key, client_for):
    anonymous = client_for(make_key("shard:create"), agent=None)
    response = anonymous.post("/api/shards", {"id": "x", "type": "decision"}, format="json")
    assert_envelope(response, 400, "AGENT_ID_REQUIRED")


def test_a_key_bound_to_agents_cannot_act_as_another(make_key, client_for):
    raw = make_key("shard:read", "shard:create", agents=["planner-1"])
    impostor = client_for(raw, agent="planner-2")
    assert_envelope(impostor.get("/api/shards"), 403, "AGENT_NOT_ALLOWED")
    assert client_for(raw, agent="planner-1").get("/api/shards").status_code == 200


def test_a_body_that_is_not_json_is_malformed_json(planner):
    response = planner.post("/api/shards", data="{nope", content_type="application/json")
    assert_envelope(response, 400, "MALFORMED_JSON")


def test_a_body_that_is_not_an_object_is_a_validation_error(planner):
    response = planner.post("/api/shards", data="[1, 2]", content_type="application/json")
    assert_envelope(response, 400, "VALIDATION_ERROR")


def test_a_body_in_another_media_type_is_refused(planner):
    response = planner.post(
        "/api/shards", data="id=x", content_type="application/x-www-form-urlencoded"
    )
    assert_envelope(response, 415, "UNSUPPORTED_MEDIA_TYPE")


def test_an_unknown_api_path_is_json_not_found(planner):
    assert_envelope(planner.get("/api/no/such/thing"), 404, "NOT_FOUND")


def test_an_unsupported_method_is_method_not_allowed(planner):
    assert_envelope(planner.put("/api/shards", {}, format="json"), 405, "METHOD_NOT_ALLOWED")
    assert_envelope(planner.get("/api/shards/x/commit"), 405, "METHOD_NOT_ALLOWED")


def test_an_agent_id_with_odd_characters_is_a_validation_error(make_key, client_for):
    response = client_for(make_key("shard:read"), agent="a b<c>").get("/api/shards")
    assert_envelope(response, 400, "VALIDATION_ERROR")


def test_an_unexpected_crash_under_api_is_a_json_500(planner, monkeypatch):
    from shards import views

    def explode(**kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(views.services, "shard_read", explode)
    planner.raise_request_exception = False
    response = planner.get("/api/shards/anything")
    assert_envelope(response, 500, "INTERNAL_ERROR")
    assert "boom" not in response.content.decode()
