"""The seed patterns document's Python samples (``advanced_patterns.md`` beside
this file), extracted at run time and run as printed.

The document leaves out the imports every sample relies on (``asyncio``,
``time``, ``datetime``, the SDK's client and errors): ``PRELUDE`` supplies exactly
those, as a reader pasting the samples into one module would. Nothing else is
added to a sample's namespace except what a test passes in: ``GATEWAY`` and the
application's own callbacks (``process``, ``human_or_ai_review``)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from zerolock_sdk import IrreversibleShardError, StaleCommitError, ZeroLockClient

DOCUMENT = Path(__file__).with_name("advanced_patterns.md")
_BLOCK = re.compile(r"^## (\d+)\. (.+?)\n\n```python\n(.*?)\n```$", re.M | re.S)


def blocks() -> dict[int, tuple[str, str]]:
    """``{number: (title, source)}`` for every fenced python block, in order."""
    return {
        int(number): (title, source)
        for number, title, source in _BLOCK.findall(DOCUMENT.read_text(encoding="utf-8"))
    }


def source(number: int) -> str:
    return blocks()[number][1]


def prelude() -> dict[str, Any]:
    """The names the samples use without importing them."""
    return {
        "__name__": "seed_sample",
        "asyncio": asyncio,
        "time": time,
        "datetime": datetime,
        "timedelta": timedelta,
        "ZeroLockClient": ZeroLockClient,
        "StaleCommitError": StaleCommitError,
        "IrreversibleShardError": IrreversibleShardError,
    }


async def run(code: str, namespace: dict[str, Any], name: str = "<seed sample>") -> None:
    """Runs a sample in ``namespace`` (top-level ``await`` / ``async with`` allowed,
    as the document's snippets use them); definitions land in ``namespace``."""
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    outcome = eval(compiled, namespace)  # noqa: S307 - the vendored samples are the test subject
    if inspect.iscoroutine(outcome):
        await outcome
