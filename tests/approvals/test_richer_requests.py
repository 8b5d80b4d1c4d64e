"""Requests carry metadata, name the key that asked, and refuse unknown fields."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from approvals.models import Approval
from approvals.roles import groups_ensure

pytestmark = pytest.mark.django_db

METADATA = {
    "tool": "stripe.payouts.create",
    "arguments": {"amount": 250, "currency": "EUR"},
    "links": ["https://tickets.example/T-42"],
    "ticket": "<script>alert('x')</script>",
}


@pytest.fixture
def executor(make_key, client_for, admin):
    admin.post(
        "/api/shards",
        {"id": "treasury", "type": "decision", "initial_value": {"balance": 1000}},
        format="json",
    )
    key = make_key("shard:read", "approval:request", agents=["executor"], name="payments bot")
    return client_for(key, agent="executor"), key


def ask(client, **extra):
    return client.post(
        "/api/approvals/request",
        {
            "shard_id": "treasury",
            "proposed_value": {"balance": 750},
            "expected_version": 1,
            "description": "Pay ACME",
            **extra,
        },
        format="json",
    )


def error_of(response) -> dict:
    assert response["Content-Type"].startswith("application/json")
    return response.json()["error"]


def test_metadata_is_stored_and_returned_with_the_key_that_asked(executor):
    client, key = executor
    response = ask(client, metadata=METADATA)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["metadata"] == METADATA
    prefix = Approval.objects.get(pk=body["id"]).requested_key_prefix
    assert body["requested_key"] == {"name": "payments bot", "prefix": prefix}
    assert key.startswith(f"zl_{prefix}") or prefix in key
    detail = client.get(f"/api/approvals/{body['id']}").json()
    assert detail["metadata"] == METADATA


def test_a_request_without_metadata_has_an_empty_object(executor):
    client, _ = executor
    assert ask(client).json()["metadata"] == {}


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"reason": "because"}, "reason"),
        ({"metadata": ["not", "an", "object"]}, "metadata"),
        ({"metadata": "text"}, "metadata"),
        ({"metadata": {"blob": "x" * 20000}}, "metadata"),
        (
            {"metadata": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}},
            "metadata",
        ),
    ],
)
def test_unknown_fields_and_bad_metadata_get_400_in_the_envelope(executor, extra, field):
    client, _ = executor
    response = ask(client, **extra)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "VALIDATION_ERROR"
    assert field in error["fields"], error
    assert Approval.objects.count() == 0


def test_deciding_with_an_unknown_field_is_refused(executor, make_key, client_for):
    client, _ = executor
    approval_id = ask(client).json()["id"]
    officer = client_for(make_key("approval:decide", "shard:read"), agent="officer")
    response = officer.post(
        f"/api/approvals/{approval_id}/approve", {"comment": "ok"}, format="json"
    )
    assert response.status_code == 400
    assert "comment" in error_of(response)["fields"]
    assert Approval.objects.get(pk=approval_id).status == "pending"


def test_the_detail_page_shows_metadata_escaped_and_the_key_name(executor):
    client, _ = executor
    approval_id = ask(client, metadata=METADATA).json()["id"]
    groups_ensure()
    rita = User.objects.create_user("rita", password="x")
    rita.groups.add(Group.objects.get(name="Risk officers"))
    page = Client()
    page.force_login(rita)
    html = page.get(f"/console/approvals/{approval_id}").content.decode()
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "stripe.payouts.create" in html and "&quot;currency&quot;: &quot;EUR&quot;" in html
    assert "“payments bot”" in html
