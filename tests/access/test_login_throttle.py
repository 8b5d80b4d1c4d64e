"""Issue "Hardening, round three", M6: console and admin logins are throttled per
username and address (django-axes, access/logins.py), over a live server with a
client that carries the CSRF cookie and token as a browser does."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command

from audit.models import AuditEntry
from tests.conftest import server_env, start_server, stop_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

RIGHT = "correct horse battery"
WRONG = "incorrect donkey staple"
LOGIN_PAGES = ["/accounts/login/", "/admin/login/"]


@contextmanager
def browser(url: str, address: str = "127.0.0.1") -> Iterator[httpx.Client]:
    """A client from one local address (the loopback answers all of 127/8)."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(base_url=url, transport=transport, timeout=30) as client:
        yield client


def sign_in(client: httpx.Client, page: str, username: str, password: str) -> httpx.Response:
    """Fetches the form for its CSRF cookie, then posts it with the token."""
    client.get(page).raise_for_status()
    return client.post(
        page,
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
            "next": "/admin/" if page.startswith("/admin/") else "/console/",
        },
    )


def signed_in(response: httpx.Response) -> bool:
    return response.status_code == 302 and "sessionid" in response.cookies


def fail_until_locked(client: httpx.Client, page: str, username: str) -> list[httpx.Response]:
    answers = [sign_in(client, page, username, WRONG) for _ in range(settings.AXES_FAILURE_LIMIT)]
    # The failures before the limit are the plain form again; the one that
    # reaches it is already the lockout page.
    assert [a.status_code for a in answers[:-1]] == [200] * (len(answers) - 1)
    assert answers[-1].status_code == 429
    return answers


def assert_locked_page(response: httpx.Response, username: str) -> None:
    assert response.status_code == 429
    assert "sessionid" not in response.cookies
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "Sign-in paused" in page and username in page
    assert "Try again after" in page and " UTC" in page
    assert 0 < int(response.headers["Retry-After"]) <= settings.AXES_COOLOFF_TIME.total_seconds()
    assert "console/console.css" in page  # our base template, not Django's debug page
    assert "Traceback" not in page


def lock_entries(username: str, deadline: float = 30) -> list[AuditEntry]:
    """The audit entries of this username's locks, once the server's write-behind
    thread has written them (every 0.2 s)."""
    end = time.monotonic() + deadline
    while True:
        found = list(
            AuditEntry.objects.filter(action="login.locked_out", details__username=username)
        )
        if found or time.monotonic() > end:
            return found
        time.sleep(0.2)


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_failures_lock_the_pair_the_right_password_is_refused_others_sign_in_and_a_command_unlocks(
    live_server_url, page, capsys
):
    User.objects.create_user("rita", password=RIGHT, is_staff=True)
    User.objects.create_user("victor", password=RIGHT, is_staff=True)
    with browser(live_server_url) as attacker:
        fail_until_locked(attacker, page, "rita")
        refused = sign_in(attacker, page, "rita", RIGHT)
        assert_locked_page(refused, "rita")
        assert_locked_page(sign_in(attacker, page, "rita", WRONG), "rita")

        # The lock is on the pair: another user from the same address, and the
        # same user from another address, both still sign in.
        assert signed_in(sign_in(attacker, page, "victor", RIGHT))
    with browser(live_server_url, "127.0.0.2") as elsewhere:
        assert signed_in(sign_in(elsewhere, page, "rita", RIGHT))

    (entry,) = lock_entries("rita")  # one per lock, not one per refused attempt
    assert entry.details["address"] == "127.0.0.1"
    assert entry.details["path"] == page
    assert entry.details["failures"] == settings.AXES_FAILURE_LIMIT
    stored = json.dumps(entry.details) + entry.agent_id + entry.key_prefix
    assert RIGHT not in stored and WRONG not in stored
    call_command("verify_audit")
    assert "Audit chain intact" in capsys.readouterr().out

    call_command("axes_reset_username", "rita")
    with browser(live_server_url) as attacker:
        assert signed_in(sign_in(attacker, page, "rita", RIGHT))
    # Long after the refused attempts' requests: still the one entry.
    assert len(lock_entries("rita")) == 1


def test_an_admin_unlocks_a_pair_by_deleting_its_attempt_in_the_admin():
    User.objects.create_user("olga", password=RIGHT, is_staff=True)
    User.objects.create_superuser("root", password=RIGHT)
    # A server of its own: the admin's log entry names AccessAttempt's content
    # type, which a long-lived server would hold from before a test's flush
    # made the content types anew (a foreign-key failure no deployment has).
    proc, url = start_server(server_env())
    try:
        with browser(url) as officer:
            fail_until_locked(officer, "/admin/login/", "olga")
            assert_locked_page(sign_in(officer, "/admin/login/", "olga", RIGHT), "olga")

        with browser(url) as admin:
            assert signed_in(sign_in(admin, "/admin/login/", "root", RIGHT))
            listing = admin.get("/admin/axes/accessattempt/?q=olga")
            assert listing.status_code == 200 and "Locked Out" in listing.text
            attempt = AccessAttempt.objects.get(username="olga", ip_address="127.0.0.1")
            delete = f"/admin/axes/accessattempt/{attempt.pk}/delete/"
            admin.get(delete).raise_for_status()
            token = admin.cookies["csrftoken"]
            done = admin.post(delete, data={"post": "yes", "csrfmiddlewaretoken": token})
            assert done.status_code == 302, done.text[:2000]
        assert not AccessAttempt.objects.filter(username="olga").exists()

        with browser(url) as officer:
            assert signed_in(sign_in(officer, "/admin/login/", "olga", RIGHT))
    finally:
        stop_server(proc)


def test_a_lock_lifts_by_itself_after_the_cool_down_however_often_it_was_tried():
    User.objects.create_user("rita", password=RIGHT)
    cool_off = 3
    env = server_env() | {
        "ZEROLOCK_LOGIN_FAILURE_LIMIT": "2",
        "ZEROLOCK_LOGIN_COOLOFF_SECONDS": str(cool_off),
    }
    proc, url = start_server(env)
    try:
        with browser(url) as client:
            for _ in range(2):
                last = sign_in(client, "/accounts/login/", "rita", WRONG)
            locked_at = time.monotonic()
            assert last.status_code == 429
            # Attempts during the lock do not move its end.
            while time.monotonic() < locked_at + cool_off - 1.5:
                refused = sign_in(client, "/accounts/login/", "rita", RIGHT)
                assert refused.status_code == 429, "the lock lifted before its cool-down"
                assert 0 < int(refused.headers["Retry-After"]) <= cool_off
                time.sleep(0.3)
            time.sleep(max(0.0, locked_at + cool_off + 0.5 - time.monotonic()))
            deadline = time.monotonic() + 30
            while not signed_in(answer := sign_in(client, "/accounts/login/", "rita", RIGHT)):
                assert answer.status_code == 429, answer.text[:500]
                assert time.monotonic() < deadline, "the lock never lifted"
                time.sleep(0.5)
    finally:
        stop_server(proc)
