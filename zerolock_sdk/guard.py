"""``zerolock guard``: a git pre-commit hook that refuses a commit touching paths
another agent has reserved exclusively (``POST /api/reservations/check``).

The hook is advice with teeth, not a lock: the reservation lives on the server,
the commit is local, and ``git commit --no-verify`` always gets past it. What it
buys is that nobody overwrites a reserved file *by accident*. So it fails closed:
a server it cannot reach refuses the commit (exit 2) unless fail-open was asked
for, since a silent pass is exactly the accident the hook exists to stop.

Exit codes: 0 clean (or nothing staged), 1 a staged path is reserved by another
agent, 2 the check could not be made (server unreachable, no key, no agent id,
a key without ``shard:read``, not a git repository)."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import httpx

from .client import ZeroLockClient, resolve_url
from .errors import MissingApiKeyError, ZeroLockError
from .models import ReservationConflict

EXIT_CLEAN, EXIT_CONFLICT, EXIT_ERROR = 0, 1, 2
# Paths per check request: half the server's limit, so one slow request never
# holds a commit long and a huge commit (a vendored tree) still goes through.
CHECK_BATCH = 500
REPORTED_PATHS = 50
AGENT_ENV = "ZEROLOCK_AGENT_ID"
FAIL_OPEN_ENV = "ZEROLOCK_GUARD_FAIL_OPEN"
# The line `uninstall` looks for: it removes a hook only when it wrote it.
HOOK_MARKER = "# zerolock-guard-hook: written by `zerolock guard install`"
BYPASS = "git commit --no-verify"


class GitError(Exception):
    """git failed or is missing, or this is not a work tree: nothing to check."""


@dataclass(frozen=True)
class GuardConfig:
    """Where and as whom to ask. ``api_key`` "" falls back to ``$ZEROLOCK_API_KEY``
    (the client's own rule); ``url`` None to ``$ZEROLOCK_URL``."""

    url: str | None = None
    agent_id: str = ""
    api_key: str = ""
    fail_open: bool = False
    timeout: float = 10.0


def env_flag(value: str | None) -> bool:
    """``1``, ``true``, ``yes`` or ``on`` (any case) is set; anything else is not,
    so a stray ``0`` or ``false`` never turns fail-open on."""
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _git(args: Sequence[str], cwd: str | Path | None) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except OSError as error:
        raise GitError(f"could not run git: {error}") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise GitError(f"git {args[0]} failed: {message or f'exit {done.returncode}'}")
    return done.stdout


def staged_paths(cwd: str | Path | None = None) -> list[str]:
    """The paths the commit being made changes, relative to the top of the work
    tree. ``--no-renames``: a rename is its old path deleted and its new one added,
    so moving a file out of a reserved directory counts as touching it; deletions
    count too. ``-z``: names exactly as stored, whatever ``core.quotePath`` says.
    A hook inherits ``GIT_INDEX_FILE``, so ``git commit -a`` or ``git commit PATH``
    is checked on the index it will really commit."""
    out = _git(["diff", "--cached", "--name-only", "--no-renames", "-z"], cwd)
    return [os.fsdecode(name) for name in out.split(b"\0") if name]


def batches(paths: Sequence[str], size: int = CHECK_BATCH) -> Iterator[list[str]]:
    for start in range(0, len(paths), size):
        yield list(paths[start : start + size])


async def find_conflicts(client: ZeroLockClient, paths: Sequence[str]) -> list[ReservationConflict]:
    """Every (path, reservation) pair in the way, batch by batch."""
    conflicts: list[ReservationConflict] = []
    for batch in batches(paths):
        conflicts += await client.check_reservations(batch)
    return conflicts


def is_unreachable(error: Exception) -> bool:
    """The server could not answer: no connection, a timeout, a 5xx (a proxy's
    too). Only these may fail open; a refused key or a bad URL is a setup to fix,
    never something to wave through."""
    if isinstance(error, httpx.UnsupportedProtocol):
        return False
    if isinstance(error, httpx.TransportError):
        return True
    return isinstance(error, ZeroLockError) and (error.status >= 500 or error.status == 408)


def conflict_report(conflicts: Sequence[ReservationConflict]) -> str:
    """What the person committing needs: which files, whose they are (agent and
    key), why, until when, and how to get past it knowingly. At most
    ``REPORTED_PATHS`` paths are spelled out: a moved tree would bury the rest."""
    by_path: dict[str, list[ReservationConflict]] = {}
    for conflict in conflicts:
        by_path.setdefault(conflict.path, []).append(conflict)
    count = len(by_path)
    holders = {(c.reservation.holder, c.reservation.key_prefix) for c in conflicts}
    lines = [
        f"zerolock guard: commit refused: {count} staged "
        f"{'path is' if count == 1 else 'paths are'} reserved by "
        f"{'another agent' if len(holders) == 1 else 'other agents'}.",
        "",
    ]
    for path, held in list(by_path.items())[:REPORTED_PATHS]:
        lines.append(f"  {path}")
        for conflict in held:
            r = conflict.reservation
            key = f"key {r.key_name!r}" if r.key_name else f"key {r.key_prefix}"
            lines.append(f"    held by {r.holder} ({key}), patterns: {', '.join(r.patterns)}")
            lines.append(f"    reason: {r.reason or '(none given)'}")
            lines.append(
                f"    expires: {r.expires_at or f'when its lease {r.lease_id} ends'}"
                f" (reservation {r.id})"
            )
    if count > REPORTED_PATHS:
        lines.append(f"  ... and {count - REPORTED_PATHS} more paths.")
    lines += [
        "",
        "Ask the holder to release it, wait for it to expire, or commit anyway with:",
        f"  {BYPASS}",
    ]
    return "\n".join(lines) + "\n"


def _say(out: TextIO, text: str) -> None:
    out.write(text if text.endswith("\n") else text + "\n")
    out.flush()


def run_guard(config: GuardConfig, *, cwd: str | Path | None = None, out: TextIO) -> int:
    """The pre-commit check; returns the exit code and writes what it found to ``out``."""
    try:
        paths = staged_paths(cwd)
    except GitError as error:
        _say(out, f"zerolock guard: {error}")
        return EXIT_ERROR
    if not paths:
        return EXIT_CLEAN
    agent_id = config.agent_id or os.environ.get(AGENT_ENV, "")
    if not agent_id:
        # The server needs one to tell this agent's reservations from others'.
        _say(
            out,
            f"zerolock guard: no agent id: set {AGENT_ENV} (or pass --agent-id) to the id "
            "this work tree commits as.",
        )
        return EXIT_ERROR
    try:
        conflicts = asyncio.run(_ask(config, agent_id, paths))
    except MissingApiKeyError as error:
        _say(out, f"zerolock guard: {error.message}")
        return EXIT_ERROR
    except (ZeroLockError, httpx.HTTPError, httpx.InvalidURL) as error:
        if not is_unreachable(error):
            _say(out, f"zerolock guard: the reservation check failed: {error}")
            return EXIT_ERROR
        where = resolve_url(config.url)
        if config.fail_open:
            _say(
                out,
                f"zerolock guard: warning: the ZeroLock server ({where}) is unreachable "
                f"({_describe(error)}); committing WITHOUT the reservation check (fail-open).",
            )
            return EXIT_CLEAN
        _say(
            out,
            f"zerolock guard: commit refused: the ZeroLock server ({where}) is unreachable "
            f"({_describe(error)}), so the staged paths could not be checked against other "
            f"agents' reservations.\nFix ZEROLOCK_URL, let commits through while it is down "
            f"({FAIL_OPEN_ENV}=1 or --fail-open), or commit anyway with:\n  {BYPASS}",
        )
        return EXIT_ERROR
    except (KeyError, TypeError) as error:
        # A 2xx that is not the check's answer: the URL points at something else.
        _say(out, f"zerolock guard: not a ZeroLock answer ({error!r}): check ZEROLOCK_URL.")
        return EXIT_ERROR
    if conflicts:
        _say(out, conflict_report(conflicts))
        return EXIT_CONFLICT
    return EXIT_CLEAN


async def _ask(
    config: GuardConfig, agent_id: str, paths: Sequence[str]
) -> list[ReservationConflict]:
    # A hook waits for nobody: no 429 retries (each could sleep up to 30 s).
    async with ZeroLockClient(
        config.url,
        agent_id=agent_id,
        api_key=config.api_key or None,
        timeout=config.timeout,
        max_rate_limit_retries=0,
    ) as client:
        return await find_conflicts(client, paths)


def _describe(error: BaseException) -> str:
    if isinstance(error, ZeroLockError):
        return f"HTTP {error.status}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


# --- the hook file ------------------------------------------------------------------


def hook_path(cwd: str | Path | None = None) -> Path:
    """Where git runs the pre-commit hook from: ``core.hooksPath`` if set, the
    common git directory's ``hooks/`` in a linked worktree. git answers relative
    to ``cwd`` (absolute for an absolute ``core.hooksPath``)."""
    out = _git(["rev-parse", "--git-path", "hooks/pre-commit"], cwd)
    path = Path(os.fsdecode(out.rstrip(b"\n")))
    return path if path.is_absolute() else Path(cwd or os.getcwd()) / path


def _sh_quoted(text: str) -> str:
    """``text`` inside sh double quotes (only these four are special there)."""
    for char in ("\\", '"', "$", "`"):
        text = text.replace(char, "\\" + char)
    return f'"{text}"'


def hook_script(python: str) -> str:
    """The hook: this interpreter (the one with the SDK installed), whatever PATH
    the committing shell has."""
    return (
        "#!/bin/sh\n"
        f"{HOOK_MARKER}\n"
        "# Refuses a commit of paths another agent reserved (zerolock_sdk/README.md).\n"
        f"# Bypass once: {BYPASS}. Remove: zerolock guard uninstall.\n"
        f'exec {_sh_quoted(python)} -m zerolock_sdk.cli guard "$@"\n'
    )


def is_our_hook(path: Path) -> bool:
    try:
        return HOOK_MARKER in path.read_text(errors="replace")
    except OSError:
        return False


def install_hook(
    python: str, *, force: bool = False, cwd: str | Path | None = None, out: TextIO
) -> int:
    """Writes the hook (0). Replaces a hook of ours (a new interpreter path, say);
    refuses another one (1) unless ``force``: it may be someone's whole setup."""
    try:
        path = hook_path(cwd)
    except GitError as error:
        _say(out, f"zerolock guard: {error}")
        return EXIT_ERROR
    if (path.exists() or path.is_symlink()) and not force and not is_our_hook(path):
        _say(
            out,
            f"zerolock guard: {path} exists and was not written by zerolock guard; left "
            "alone. Call `python -m zerolock_sdk.cli guard` from it yourself, or replace it "
            "with `zerolock guard install --force`.",
        )
        return EXIT_CONFLICT
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()  # --force: replace the link itself, never write through it
    path.write_text(hook_script(python))
    mode = path.stat().st_mode
    path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    _say(out, f"zerolock guard: installed {path}")
    return EXIT_CLEAN


def uninstall_hook(*, cwd: str | Path | None = None, out: TextIO) -> int:
    """Removes the hook if it is ours (0; also 0 when there is none); another
    hook is left alone (1)."""
    try:
        path = hook_path(cwd)
    except GitError as error:
        _say(out, f"zerolock guard: {error}")
        return EXIT_ERROR
    if not (path.exists() or path.is_symlink()):
        _say(out, f"zerolock guard: no hook at {path}; nothing to remove.")
        return EXIT_CLEAN
    if not is_our_hook(path):
        _say(out, f"zerolock guard: {path} was not written by zerolock guard; left alone.")
        return EXIT_CONFLICT
    path.unlink()
    _say(out, f"zerolock guard: removed {path}")
    return EXIT_CLEAN
