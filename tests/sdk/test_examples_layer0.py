"""The bare-use script at the top of examples/README.md and the Layer 0 demos
(CrewAI, Temporal) run against a live server exactly as the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from access.services import api_key_create
from tests.conftest import ROOT
from tests.sdk.extras import require

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def run_script(url: str, script: Path, *args: str) -> str:
    _, key = api_key_create(name=f"example {script.parent.name}", permissions=["admin"])
    base = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLOCK_")}
    result = subprocess.run(
        [sys.executable, str(script), *args],
        env={**base, "ZEROLOCK_URL": url, "ZEROLOCK_API_KEY": key},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_readme_opens_with_a_ten_line_script_that_runs(live_server_url, tmp_path):
    readme = (ROOT / "examples" / "README.md").read_text()
    first = re.search(r"```python\n(.*?)```", readme, re.S)
    assert first and readme.index("```python") < readme.index("## ")  # it opens the page
    script = first.group(1)
    assert len(script.strip().splitlines()) == 10
    path = tmp_path / "bare.py"
    path.write_text(script)
    out = run_script(live_server_url, path)
    assert "committed: CommitResult(version=2" in out
    assert "refused, someone was first: 2 2" in out


def test_the_crewai_demo_researches_every_topic_once(live_server_url):
    require("crewai", "crewai")
    out = run_script(live_server_url, ROOT / "examples" / "crewai-demo" / "main.py")
    assert "topics claimed: 4/4" in out and "findings recorded: 4/4" in out
    notes = re.findall(r"^  (\S+): notes on \1 by (researcher-[ab])$", out, re.M)
    assert len(notes) == 4


def test_the_temporal_demo_books_a_retried_commit_once(live_server_url):
    require("temporalio", "temporal")
    out = run_script(live_server_url, ROOT / "examples" / "temporal-demo" / "main.py", "--local")
    assert "'claimed': True" in out
    assert "commit attempt 1: version 2" in out
    assert "commit attempt 2 (retry): version 2 (replayed)" in out
    assert "ledger versions: [1, 2] -> booked once" in out
    assert "ledger now: {'p-1': 250}" in out
