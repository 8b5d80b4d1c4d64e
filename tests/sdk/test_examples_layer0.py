"""The bare-use script at the top of examples/README.md and the Layer 0 demos
(CrewAI, Temporal) run against a live server exactly as their READMEs say."""

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


def run_script(url: str, script: Path, *args: str, **env: str) -> str:
    _, key = api_key_create(name=f"example {script.parent.name}", permissions=["admin"])
    base = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLOCK_")}
    result = subprocess.run(
        [sys.executable, str(script), *args],
        env={**base, "ZEROLOCK_URL": url, "ZEROLOCK_API_KEY": key, **env},
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


def test_the_temporal_demo_books_the_payout_once_on_approval(live_server_url):
    """As examples/temporal-demo/README.md runs it: a real Temporal dev server the
    demo starts itself, two workflows racing for one payout, a second key
    approving."""
    require("temporalio", "temporal")
    if os.environ.get("ZEROLOCK_SKIP_RUNTIMES") == "1":
        pytest.skip(
            "ZEROLOCK_SKIP_RUNTIMES=1: the Temporal dev server runs on one CI configuration"
        )
    _, approver = api_key_create(name="approver", permissions=["approval:decide"])
    out = run_script(
        live_server_url,
        ROOT / "examples" / "temporal-demo" / "main.py",
        "--auto-approve",
        ZEROLOCK_APPROVER_KEY=approver,
    )
    assert re.search(r"^Temporal dev server at 127\.0\.0\.1:\d+$", out, re.M), out
    lost = re.findall(
        r"^payout-\w+-\d: \{'booked': False, 'held_by': 'payout-\w+-\d'\}$", out, re.M
    )
    won = re.findall(r"^payout-\w+-\d: \{'applied': True, .*'booked': True.*$", out, re.M)
    assert len(lost) == 1 and len(won) == 1, out
    assert "ledger history: [(1, {}), (2, {'p-1': 250})]" in out
