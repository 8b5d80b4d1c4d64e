"""``zerolock guard`` as git runs it: a real repository, the hook that
``zerolock guard install`` writes, real ``git commit``s against a live server.
Another agent's exclusive reservation refuses the commit; the holder's own, a
path outside it, or a released one do not; an unreachable server fails closed
unless fail-open is asked for."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from access.services import api_key_create
from zerolock_sdk import SyncZeroLockClient
from zerolock_sdk.guard import HOOK_MARKER, hook_path

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
AGENT = ["shard:read", "shard:write"]
FOREIGN_HOOK = "#!/bin/sh\n# the team's own hook\nexit 0\n"


def a_key(name: str, permissions: list[str] = AGENT) -> str:
    return api_key_create(name=name, permissions=permissions)[1]


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there once the socket is closed


@pytest.fixture
def base_env(tmp_path) -> dict[str, str]:
    """No ZEROLOCK_* of the caller's, and no git configuration but the repo's own
    (a global core.hooksPath would move the hook)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZEROLOCK_", "GIT_"))}
    home = tmp_path / "home"
    home.mkdir()
    return env | {"HOME": str(home), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False
    )


def zerolock(repo: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zerolock_sdk.cli", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def repo(tmp_path, base_env) -> Path:
    """A repository with one commit and the guard's hook installed."""
    path = tmp_path / "repo"
    path.mkdir()
    for args in (
        ("init", "-q"),
        ("config", "user.name", "Test Committer"),
        ("config", "user.email", "committer@example.com"),
        ("config", "commit.gpgsign", "false"),
    ):
        assert git(path, *args, env=base_env).returncode == 0
    (path / "src").mkdir()
    (path / "src" / "old.py").write_text("old\n")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "-A", env=base_env)
    first = git(path, "commit", "-q", "-m", "start", env=base_env)
    assert first.returncode == 0, first.stderr
    installed = zerolock(path, "guard", "install", env=base_env)
    assert installed.returncode == 0, installed.stderr
    return path


@pytest.fixture
def keys() -> dict[str, str]:
    return {"alice": a_key("alice's key"), "bob": a_key("bob's key")}


def agent_env(base_env: dict[str, str], url: str, agent: str, key: str, **extra: str):
    return base_env | {
        "ZEROLOCK_URL": url,
        "ZEROLOCK_AGENT_ID": agent,
        "ZEROLOCK_API_KEY": key,
        **extra,
    }


def commit(repo: Path, env: dict[str, str], *files: str) -> subprocess.CompletedProcess[str]:
    """Writes and stages ``files``, then ``git commit`` (the hook runs)."""
    for name in files:
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"{name} by {env.get('ZEROLOCK_AGENT_ID')}\n")
        git(repo, "add", name, env=env)
    return git(repo, "commit", "-m", f"change {' '.join(files)}", env=env)


def alice_reserves_src(url: str, key: str) -> str:
    with SyncZeroLockClient(url, agent_id="alice", api_key=key) as alice:
        return alice.reserve(["src/**"], ttl_seconds=600, reason="moving the parser").id


def test_a_commit_of_a_path_another_agent_reserved_is_refused_naming_the_holder(
    live_server_url, repo, keys, base_env
):
    alice_reserves_src(live_server_url, keys["alice"])
    bob = agent_env(base_env, live_server_url, "bob", keys["bob"])
    refused = commit(repo, bob, "src/app.py")
    assert refused.returncode != 0
    output = refused.stdout + refused.stderr
    assert "src/app.py" in output and "held by alice" in output
    assert "alice's key" in output and "src/**" in output and "moving the parser" in output
    assert "expires:" in output and "git commit --no-verify" in output
    assert git(repo, "rev-list", "--count", "HEAD", env=bob).stdout.strip() == "1"
    # The hook's own verdict for a conflict is exit 1 (2 means "could not check").
    assert zerolock(repo, "guard", env=bob).returncode == 1
    assert git(repo, "commit", "-q", "--no-verify", "-m", "anyway", env=bob).returncode == 0


def test_a_commit_outside_the_reserved_paths_passes(live_server_url, repo, keys, base_env):
    alice_reserves_src(live_server_url, keys["alice"])
    bob = agent_env(base_env, live_server_url, "bob", keys["bob"])
    done = commit(repo, bob, "docs/readme.md")
    assert done.returncode == 0, done.stdout + done.stderr


def test_once_the_holder_releases_the_commit_it_refused_passes(
    live_server_url, repo, keys, base_env
):
    reservation_id = alice_reserves_src(live_server_url, keys["alice"])
    bob = agent_env(base_env, live_server_url, "bob", keys["bob"])
    assert commit(repo, bob, "src/app.py").returncode != 0
    with SyncZeroLockClient(live_server_url, agent_id="alice", api_key=keys["alice"]) as alice:
        alice.release_reservation(reservation_id)
    done = git(repo, "commit", "-m", "now", env=bob)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_holders_own_commit_of_a_reserved_path_passes(live_server_url, repo, keys, base_env):
    alice_reserves_src(live_server_url, keys["alice"])
    alice = agent_env(base_env, live_server_url, "alice", keys["alice"])
    done = commit(repo, alice, "src/x.py")
    assert done.returncode == 0, done.stdout + done.stderr


def test_deleting_or_renaming_a_file_out_of_a_reserved_directory_is_refused_too(
    live_server_url, repo, keys, base_env
):
    alice_reserves_src(live_server_url, keys["alice"])
    bob = agent_env(base_env, live_server_url, "bob", keys["bob"])
    (repo / "lib").mkdir()
    assert git(repo, "mv", "src/old.py", "lib/old.py", env=bob).returncode == 0
    renamed = git(repo, "commit", "-m", "move", env=bob)
    assert renamed.returncode != 0 and "src/old.py" in renamed.stderr
    git(repo, "reset", "-q", "--hard", env=bob)
    assert git(repo, "rm", "-q", "src/old.py", env=bob).returncode == 0
    deleted = git(repo, "commit", "-m", "delete", env=bob)
    assert deleted.returncode != 0 and "src/old.py" in deleted.stderr


def test_an_unreachable_server_refuses_the_commit(repo, keys, base_env):
    bob = agent_env(base_env, closed_port_url(), "bob", keys["bob"])
    refused = commit(repo, bob, "docs/readme.md")
    assert refused.returncode != 0
    assert "unreachable" in refused.stderr and "--no-verify" in refused.stderr
    assert zerolock(repo, "guard", env=bob).returncode == 2


def test_with_fail_open_an_unreachable_server_lets_the_commit_through_with_a_warning(
    repo, keys, base_env
):
    bob = agent_env(base_env, closed_port_url(), "bob", keys["bob"], ZEROLOCK_GUARD_FAIL_OPEN="1")
    done = commit(repo, bob, "src/app.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" in done.stderr and "unreachable" in done.stderr
    # The flag does the same as the variable; a "0" turns nothing on.
    bob["ZEROLOCK_GUARD_FAIL_OPEN"] = "0"
    commit_again = commit(repo, bob, "src/other.py")
    assert commit_again.returncode != 0
    assert zerolock(repo, "guard", "--fail-open", env=bob).returncode == 0


def test_a_key_that_may_not_read_fails_closed_even_with_fail_open(live_server_url, repo, base_env):
    writer_only = a_key("no reads", ["shard:write"])
    bob = agent_env(base_env, live_server_url, "bob", writer_only, ZEROLOCK_GUARD_FAIL_OPEN="1")
    refused = commit(repo, bob, "src/app.py")
    assert refused.returncode != 0 and "PERMISSION_DENIED" in refused.stderr
    assert zerolock(repo, "guard", env=bob).returncode == 2
    nameless = agent_env(base_env, live_server_url, "", a_key("reader"))
    assert zerolock(repo, "guard", env=nameless).returncode == 2


def test_nothing_staged_passes_without_asking_the_server(repo, base_env):
    nobody = agent_env(base_env, closed_port_url(), "bob", "")
    done = git(repo, "commit", "--allow-empty", "-m", "empty", env=nobody)
    assert done.returncode == 0, done.stdout + done.stderr


def test_install_writes_an_executable_marked_hook_running_this_interpreter(repo, base_env):
    hook = repo / ".git" / "hooks" / "pre-commit"
    assert hook_path(repo) == hook
    text = hook.read_text()
    assert HOOK_MARKER in text
    assert f'exec "{sys.executable}" -m zerolock_sdk.cli guard "$@"' in text
    assert os.access(hook, os.X_OK)
    again = zerolock(repo, "guard", "install", env=base_env)  # its own: replaced quietly
    assert again.returncode == 0 and hook.read_text() == text


def test_install_refuses_a_foreign_hook_unless_forced(repo, base_env):
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(FOREIGN_HOOK)
    refused = zerolock(repo, "guard", "install", env=base_env)
    assert refused.returncode == 1 and "--force" in refused.stderr
    assert hook.read_text() == FOREIGN_HOOK
    forced = zerolock(repo, "guard", "install", "--force", env=base_env)
    assert forced.returncode == 0 and HOOK_MARKER in hook.read_text()


def test_uninstall_removes_its_own_hook_and_leaves_a_foreign_one_alone(repo, base_env):
    hook = repo / ".git" / "hooks" / "pre-commit"
    assert zerolock(repo, "guard", "uninstall", env=base_env).returncode == 0
    assert not hook.exists()
    assert zerolock(repo, "guard", "uninstall", env=base_env).returncode == 0  # none: fine
    hook.write_text(FOREIGN_HOOK)
    left = zerolock(repo, "guard", "uninstall", env=base_env)
    assert left.returncode == 1 and hook.read_text() == FOREIGN_HOOK


def test_install_follows_core_hooks_path_and_works_from_a_subdirectory(
    live_server_url, repo, keys, base_env
):
    zerolock(repo, "guard", "uninstall", env=base_env)
    assert git(repo, "config", "core.hooksPath", "ci/hooks", env=base_env).returncode == 0
    (repo / "src").mkdir(exist_ok=True)
    installed = zerolock(repo / "src", "guard", "install", env=base_env)
    assert installed.returncode == 0, installed.stderr
    assert HOOK_MARKER in (repo / "ci" / "hooks" / "pre-commit").read_text()
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    alice_reserves_src(live_server_url, keys["alice"])
    bob = agent_env(base_env, live_server_url, "bob", keys["bob"])
    assert commit(repo, bob, "src/app.py").returncode != 0
