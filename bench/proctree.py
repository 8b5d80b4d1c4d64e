"""A process tree's members, memory and CPU time, read from /proc (no psutil here).

Shared by the benches that watch a server they started: bench/soak.py (the Celery
worker inside bin/serve, memory levelling off) and bench/peer.py (peak RSS and
CPU seconds of each peer while it is driven).
"""

from __future__ import annotations

import os

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces and parens):
    [0] is the state, [1] the parent pid, [11] utime and [12] stime in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def children_of(pid: int) -> list[int]:
    """Every descendant of pid."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(entry))[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def tree(pid: int) -> list[int]:
    """pid and every descendant."""
    return [pid, *children_of(pid)]


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except (OSError, IndexError):
        return False


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def pss_mb(pid: int) -> float:
    """Proportional set size: pages shared between processes (a forked pool child
    and its parent) counted once across them, so a tree's sum is its real footprint,
    where a sum of RSS counts every shared page again in each process."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far (0 once it is gone)."""
    try:
        fields = _stat_fields(pid)
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0
