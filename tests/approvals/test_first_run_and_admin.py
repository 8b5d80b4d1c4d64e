"""First run, console users, and the API-key admin reading right."""

from __future__ import annotations

import re
import stat
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.http import HttpRequest
from django.test import Client

from access.models import ApiKey

pytestmark = pytest.mark.django_db


def signs_in(username: str, password: str) -> bool:
    # axes' backend refuses an authenticate() without the request it throttles.
    return Client().login(request=HttpRequest(), username=username, password=password)


def test_first_run_credentials_go_to_an_owner_only_file_too(capsys, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    call_command("bootstrap")
    out = capsys.readouterr().out
    path = tmp_path / "first-run.txt"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    password = re.search(r"admin / (\S+)", text)[1]
    raw = re.search(r"(zl_\S+)", text)[1]
    assert password in out and raw in out and str(path) in out
    assert signs_in("admin", password)
    call_command("bootstrap")
    again = capsys.readouterr().out
    assert "already bootstrapped" in again and str(path) in again and "zl_" not in again


def test_reset_admin_prints_a_new_password_that_works(capsys, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    call_command("bootstrap")
    old = re.search(r"admin / (\S+)", capsys.readouterr().out)[1]
    call_command("bootstrap", "--reset-admin")
    new = re.search(r"admin / (\S+)", capsys.readouterr().out)[1]
    assert new != old
    assert signs_in("admin", new)
    assert not signs_in("admin", old)


def test_createuser_makes_risk_officers_and_viewers_for_the_console(capsys):
    from approvals.models import Approval  # noqa: F401 (the app is loaded)

    call_command("createuser", "rita", "--role", "risk-officer")
    password = re.search(r"with password (\S+)\.", capsys.readouterr().out)[1]
    call_command("createuser", "victor", "--role", "viewer", "--password", "pw-victor-1")
    rita, victor = User.objects.get(username="rita"), User.objects.get(username="victor")
    assert rita.has_perm("approvals.decide_approval") and rita.check_password(password)
    assert victor.has_perm("approvals.view_approval")
    assert not victor.has_perm("approvals.decide_approval")
    client = Client()
    client.force_login(victor)
    assert client.get("/console/").status_code == 200
    with pytest.raises(CommandError):
        call_command("createuser", "rita", "--role", "viewer")


def test_the_key_list_says_active_and_revoked_in_words(make_key):
    make_key("shard:read", name="live-key")
    gone = make_key("shard:read", name="gone-key")
    ApiKey.objects.filter(prefix=gone.split(".")[0].removeprefix("zl_")).update(revoked=True)
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "", "x"))
    html = admin.get("/admin/access/apikey/").content.decode()
    rows = {name: re.search(rf"{name}.*?</tr>", html, re.S)[0] for name in ("live-key", "gone-key")}
    assert ">active<" in rows["live-key"] and "revoked" not in rows["live-key"]
    assert ">revoked<" in rows["gone-key"]
    assert "icon-yes" not in rows["gone-key"] and "icon-no" not in rows["live-key"]


def test_the_key_created_page_is_post_redirect_get_and_shows_the_key_once():
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "", "x"))
    response = admin.post(
        "/admin/access/apikey/add/",
        {"name": "made-once", "permissions": ["shard:read"], "agent_ids": "", "_save": "Save"},
    )
    assert response.status_code == 302, response.content.decode()[:1500]
    assert ApiKey.objects.filter(name="made-once").count() == 1
    first = admin.get(response["Location"])
    raw = re.search(r'id="raw-key" readonly value="([^"]+)"', first.content.decode())[1]
    assert "no-store" in first["Cache-Control"]
    reload = admin.get(response["Location"]).content.decode()
    assert raw not in reload and "was shown once" in reload
    assert ApiKey.objects.filter(name="made-once").count() == 1


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("bad name!", "Enter a valid username"),
        ("x" * 151, "at most 150 characters"),
        ("tab\there", "Enter a valid username"),
    ],
)
def test_createuser_refuses_a_name_djangos_validator_refuses_and_creates_nothing(name, refusal):
    with pytest.raises(CommandError, match=refusal):
        call_command("createuser", name, "--role", "viewer", "--password", "pw-long-enough")
    assert not User.objects.exists()


def test_createuser_refuses_a_password_the_validators_refuse_and_creates_nothing():
    with pytest.raises(CommandError, match="too short"):
        call_command("createuser", "rita", "--role", "risk-officer", "--password", "short")
    assert not User.objects.exists()


def test_createuser_still_takes_the_longest_name_and_every_allowed_character(capsys):
    longest = "r" * 150
    call_command("createuser", longest, "--role", "viewer", "--password", "pw-long-enough")
    call_command("createuser", "rita.o+ops@example-1_x", "--role", "risk-officer")
    assert set(User.objects.values_list("username", flat=True)) == {
        longest,
        "rita.o+ops@example-1_x",
    }
    assert signs_in(longest, "pw-long-enough")


@pytest.mark.django_db(transaction=True)
def test_createuser_from_the_shell_exits_non_zero_with_the_reason():
    from tests.conftest import ROOT, server_env

    for args, reason in [
        (["bad name!", "--password", "pw-long-enough"], "Enter a valid username"),
        (["rita", "--password", "short"], "too short"),
    ]:
        done = subprocess.run(
            [sys.executable, "manage.py", "createuser", *args, "--role", "viewer"],
            cwd=ROOT,
            env=server_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0 and reason in done.stderr, done.stderr
    assert not User.objects.exists()
