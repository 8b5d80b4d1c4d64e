"""The web servers ZEROLOCK_SERVER names: uvicorn, whose process loads nothing
of Twisted, Daphne or autobahn, and Daphne through its own entry point; gunicorn
no longer (docs/decisions.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, server_env
from zerolock_site.supervisor import web_command

# What Daphne brings: Twisted (and its zope.interface), autobahn and its txaio.
DAPHNES_PACKAGES = ("twisted", "daphne", "autobahn", "zope", "txaio")

REPORT_FOREIGN = f"""
import json, sys
foreign = sorted(m for m in sys.modules if m.split(".")[0] in {DAPHNES_PACKAGES!r})
print(json.dumps({{"modules": len(sys.modules), "foreign": foreign}}))
"""


def loaded_by(code: str) -> dict:
    """Runs ``code`` in a fresh interpreter (this one has loaded the test tools),
    then reports what it left in ``sys.modules``."""
    done = subprocess.run(
        [sys.executable, "-c", code + REPORT_FOREIGN],
        cwd=ROOT,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_asgi_application_loads_nothing_of_twisted_daphne_or_autobahn():
    loaded = loaded_by("import zerolock_site.asgi")
    assert loaded["foreign"] == []
    assert loaded["modules"] > 500  # the application did load (Django, DRF, Channels)


def test_the_uvicorn_entry_point_with_its_application_loaded_imports_none_of_them_either():
    loaded = loaded_by(
        "from zerolock_site import uvicorn_server\n"
        "server = uvicorn_server.ZeroLockServer(uvicorn_server.config('127.0.0.1', 0))\n"
        "server.config.load()\n"
        "assert server.config.loaded_app is not None\n"
    )
    assert loaded["foreign"] == []


def test_uvicorn_is_the_default_and_daphne_runs_through_its_own_entry_point():
    assert web_command({}, "127.0.0.1", "8000")[1:] == [
        "-m",
        "zerolock_site.uvicorn_server",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
    ]
    assert web_command({"ZEROLOCK_SERVER": "daphne"}, "127.0.0.1", "8000")[1:3] == [
        "-m",
        "zerolock_site.daphne_server",
    ]


def test_gunicorn_is_no_longer_a_web_server_to_choose():
    with pytest.raises(SystemExit, match="expected uvicorn or daphne"):
        web_command({"ZEROLOCK_SERVER": "gunicorn"}, "127.0.0.1", "8000")
