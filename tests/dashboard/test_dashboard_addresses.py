"""The dashboard's addresses as people type them: /dashboard/ from the README,
and the pages' addresses with a trailing slash."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from approvals.roles import groups_ensure

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer() -> Client:
    groups_ensure()
    user = User.objects.create_user("vic", password="pw-pw-pw-pw")
    user.groups.add(Group.objects.get(name="Viewers"))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("typed", "page"),
    [
        ("/dashboard/", "/dashboard/shards"),
        ("/dashboard/metrics/", "/dashboard/metrics"),
        ("/dashboard/shards/", "/dashboard/shards"),
        ("/dashboard/metrics", "/dashboard/metrics"),
        ("/dashboard/agents/", "/dashboard/agents"),
    ],
)
def test_each_dashboard_address_a_person_types_leads_to_its_page(viewer, typed, page):
    response = viewer.get(typed, follow=True)
    assert response.status_code == 200
    assert response.request["PATH_INFO"] == page
    assert all(status == 302 for _, status in response.redirect_chain)


def test_the_dashboard_root_keeps_the_filter_it_was_given(viewer):
    response = viewer.get("/dashboard/?prefix=ops&type=decision")
    assert response.status_code == 302
    assert response["Location"] == "/dashboard/shards?prefix=ops&type=decision"


def test_the_dashboard_root_sends_a_stranger_to_sign_in_first():
    response = Client().get("/dashboard/", follow=True)
    assert response.request["PATH_INFO"] == "/accounts/login/"
    assert response.status_code == 200
