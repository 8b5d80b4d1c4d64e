"""The ``zerolock`` command (``[project.scripts]``); today one subcommand:

    zerolock guard [--url URL] [--agent-id ID] [--fail-open] [--timeout S]
    zerolock guard install [--force]
    zerolock guard uninstall

``zerolock guard`` is the pre-commit check (``zerolock_sdk.guard``); the hook
that ``install`` writes runs ``python -m zerolock_sdk.cli guard``, so it works
without the console script on PATH. The API key comes only from
``$ZEROLOCK_API_KEY``: a key on a command line is visible to every user of the
machine (``ps``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

from .client import URL_ENV
from .guard import (
    AGENT_ENV,
    EXIT_ERROR,
    FAIL_OPEN_ENV,
    GuardConfig,
    env_flag,
    install_hook,
    run_guard,
    uninstall_hook,
)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="zerolock", description="ZeroLock command-line tools.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    guard = commands.add_parser(
        "guard",
        help="pre-commit check: refuse committing paths another agent reserved",
        description="Checks the staged paths against other agents' exclusive path "
        "reservations. Exit 0: clean or nothing staged; 1: a path is reserved by "
        "another agent; 2: the check could not be made (fail-closed). Bypass once "
        "with `git commit --no-verify`.",
    )
    guard.add_argument("--url", help=f"the server (default ${URL_ENV}, then http://127.0.0.1:8000)")
    guard.add_argument(
        "--agent-id", help=f"the agent this work tree commits as (default ${AGENT_ENV})"
    )
    guard.add_argument(
        "--fail-open",
        action="store_true",
        help=f"let the commit through, with a warning, when the server is unreachable "
        f"(also ${FAIL_OPEN_ENV}=1)",
    )
    guard.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per request (default 10)"
    )
    actions = guard.add_subparsers(
        dest="action",
        metavar="ACTION",
        title="actions",
        description="none: run the check (what the hook does)",
    )
    install = actions.add_parser(
        "install",
        help="write the pre-commit hook (where `git rev-parse --git-path hooks/pre-commit` says)",
    )
    install.add_argument(
        "--force", action="store_true", help="replace a pre-commit hook not written by zerolock"
    )
    actions.add_parser("uninstall", help="remove the pre-commit hook if zerolock wrote it")
    return top


def guard_config(args: argparse.Namespace, environ: Mapping[str, str]) -> GuardConfig:
    """Flags win over the environment; the key is the environment's alone."""
    return GuardConfig(
        url=args.url or environ.get(URL_ENV) or None,
        agent_id=args.agent_id or environ.get(AGENT_ENV, ""),
        fail_open=args.fail_open or env_flag(environ.get(FAIL_OPEN_ENV)),
        timeout=args.timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command != "guard":  # pragma: no cover - argparse allows only guard
        return EXIT_ERROR
    if args.action == "install":
        return install_hook(sys.executable, force=args.force, out=sys.stderr)
    if args.action == "uninstall":
        return uninstall_hook(out=sys.stderr)
    return run_guard(guard_config(args, os.environ), out=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
