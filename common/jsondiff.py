from __future__ import annotations

from typing import Any

from common.boundeddiff import DiffLimits, bounded_diff

# A conflict notice is sent on every lost race, so its diff must be cheap:
# past these bounds the notice carries ``diff: null`` (the two values are in it).
CONFLICT_DIFF_LIMITS = DiffLimits(max_bytes=256 * 1024, max_depth=100, max_seconds=0.2)


def json_diff(old: Any, new: Any) -> list[dict[str, Any]] | None:
    """RFC 6902 patch turning ``old`` into ``new``, or None when it would be too
    large, deep or slow to compute (``jsonpatch.make_patch`` recursed and had no
    ceiling: a 300,000-item array took 78 s)."""
    return bounded_diff(old, new, CONFLICT_DIFF_LIMITS).patch
