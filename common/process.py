"""Processes that never outlive their parent."""

from __future__ import annotations

import ctypes
import signal
from typing import Any

_prctl: Any
try:  # loaded here, not between fork and exec
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except OSError:  # not Linux: the process groups still get stopped on exit
    _prctl = None


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies, even by kill -9, so no child is
    left behind. Runs in each child between fork and exec, and in the worker's
    pool process (supervision/apps.py)."""
    PR_SET_PDEATHSIG = 1
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
