"""The TypeScript SDK (typescript/): its build, type check and node test suite,
which starts its own live servers, and the wire types it generates from the
server's OpenAPI document, which must match what this server says today (the
schema is the contract between the two SDKs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "typescript"


def _skip_reason() -> str | None:
    if os.environ.get("ZEROLOCK_SKIP_RUNTIMES") == "1":
        return "ZEROLOCK_SKIP_RUNTIMES=1: the TypeScript SDK runs on the other CI configuration"
    if shutil.which("npm") is None and not os.environ.get("CI"):
        return "npm is not installed here (Node 20+ and npm run the TypeScript SDK's tests)"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def _run(*command: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Runs a command in typescript/ with this interpreter as the server's Python,
    failing the test with its whole output when it fails."""
    env = {**os.environ, "ZEROLOCK_PYTHON": sys.executable}
    done = subprocess.run(
        command, cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        pytest.fail(
            f"`{' '.join(command)}` in typescript/ exited {done.returncode}\n"
            f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}",
            pytrace=False,
        )
    return done


@pytest.fixture(scope="module")
def node_modules() -> None:
    """`npm ci`, only when node_modules is missing or older than the lockfile."""
    modules, lock = PACKAGE / "node_modules", PACKAGE / "package-lock.json"
    marker = modules / ".package-lock.json"  # npm rewrites it on every install
    if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
        _run("npm", "ci", "--no-audit", "--no-fund")


def test_the_generated_wire_types_match_the_servers_openapi_document(node_modules: None) -> None:
    # The message on failure says how to refresh: `cd typescript && npm run gen:types`.
    _run("node", "scripts/gen-types.mjs", "--check")


def test_the_typescript_sdk_builds_type_checks_and_passes_its_live_tests(
    node_modules: None,
) -> None:
    _run("npm", "run", "build")
    _run("npm", "run", "typecheck")
    done = _run("npm", "test", timeout=900)
    assert "# fail 0" in done.stdout, done.stdout
