"""An RFC 6902 patch between two JSON values whose cost has a ceiling.

``jsonpatch.make_patch`` recurses (a list nested 400 deep raised RecursionError)
and its list diff grows faster than linearly (a 300,000-item array took 78 s).
This walker is iterative, trims the common head and tail of lists in C, and
stops with a reason instead of an answer once the patch would pass a size cap,
the values are deeper than a depth cap, or a time budget is spent.

The patch it returns is valid but not minimal: a list's differing middle is
compared index by index, so an insertion shows as trailing replacements only
when it is not at the head or tail of the list.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

# Why a patch was not produced.
TOO_LARGE, TOO_DEEP, TOO_SLOW = "too_large", "too_deep", "too_slow"
# The clock is read once per this many steps of a walk.
_CLOCK_EVERY = 512


@dataclass(frozen=True)
class DiffLimits:
    max_bytes: int  # serialized patch size
    max_depth: int  # nesting of either value
    max_seconds: float


@dataclass(frozen=True)
class BoundedDiff:
    """``patch`` is None exactly when ``omitted`` names why."""

    patch: list[dict[str, Any]] | None
    omitted: str = ""


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Clock:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.steps = 0

    def tick(self, steps: int = 1) -> None:
        self.steps += steps
        if self.steps >= _CLOCK_EVERY:
            self.steps = 0
            if time.monotonic() > self.deadline:
                raise _Stop(TOO_SLOW)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of a JSON value (a scalar is 0, ``[]`` is 1), level by level
    without recursion. Stops once past ``limit`` and returns ``limit + 1``."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return limit + 1
        below: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            below += [child for child in children if isinstance(child, dict | list)]
        level = below
    return depth


def json_too_deep(value: Any, limit: int) -> bool:
    return json_depth(value, limit) > limit


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: Python's ``==`` says ``True == 1`` and ``[True] == [1]``;
    JSON does not. ``==`` rejects fast; equal containers are confirmed on their
    canonical text. Only called on values within the depth cap."""
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, dict | list):
        return _compact(a) == _compact(b)
    return True


def _pointer(parent: str, token: str | int) -> str:
    return f"{parent}/{str(token).replace('~', '~0').replace('/', '~1')}"


class _Patch:
    def __init__(self, max_bytes: int) -> None:
        self.ops: list[dict[str, Any]] = []
        self.room = max_bytes

    def add(self, op: str, path: str, *value: Any) -> None:
        # 2 brackets/comma per op, then the op as the wire will carry it.
        size = 2 + len(path) + len(op) + 20 + (len(_compact(value[0])) if value else 0)
        self.room -= size
        if self.room < 0:
            raise _Stop(TOO_LARGE)
        self.ops.append({"op": op, "path": path, **({"value": value[0]} if value else {})})


def _common_run(a: list, b: list, clock: _Clock, *, from_end: bool) -> int:
    """How many leading (or trailing) items the lists share, JSON-equal."""
    limit = min(len(a), len(b))
    n = 0
    while n < limit:
        i, j = (len(a) - 1 - n, len(b) - 1 - n) if from_end else (n, n)
        if a[i] is not b[j] and a[i] != b[j]:
            break
        n += 1
        clock.tick()
    if n == 0:
        return 0
    # ``!=`` passed them; one canonical comparison confirms the whole run.
    run_a, run_b = (a[len(a) - n :], b[len(b) - n :]) if from_end else (a[:n], b[:n])
    if _compact(run_a) == _compact(run_b):
        return n
    # A bool stood in for a number somewhere: fall back to item by item.
    k = 0
    while k < n:
        i, j = (len(a) - 1 - k, len(b) - 1 - k) if from_end else (k, k)
        if not _equal(a[i], b[j]):
            break
        k += 1
        clock.tick()
    return k


def _walk(old: Any, new: Any, patch: _Patch, clock: _Clock) -> None:
    stack: list[tuple[str, Any, Any]] = [("", old, new)]
    while stack:
        path, a, b = stack.pop()
        clock.tick()
        if isinstance(a, dict) and isinstance(b, dict):
            for key in a:
                if key not in b:
                    patch.add("remove", _pointer(path, key))
            for key, value in b.items():
                if key not in a:
                    patch.add("add", _pointer(path, key), value)
                elif not _equal(a[key], value):
                    stack.append((_pointer(path, key), a[key], value))
                clock.tick()
        elif isinstance(a, list) and isinstance(b, list):
            head = _common_run(a, b, clock, from_end=False)
            tail = _common_run(a[head:], b[head:], clock, from_end=True)
            middle_a, middle_b = a[head : len(a) - tail], b[head : len(b) - tail]
            both = min(len(middle_a), len(middle_b))
            # Items past the shared middle are removed (each at the same index, the
            # rest shift down) or inserted in order; the pairs before them keep
            # their indices whatever order the ops are applied in.
            for _ in range(len(middle_a) - both):
                patch.add("remove", _pointer(path, head + both))
                clock.tick()
            for offset in range(both, len(middle_b)):
                patch.add("add", _pointer(path, head + offset), middle_b[offset])
                clock.tick()
            for offset in range(both):
                if not _equal(middle_a[offset], middle_b[offset]):
                    stack.append(
                        (_pointer(path, head + offset), middle_a[offset], middle_b[offset])
                    )
                clock.tick()
        elif not _equal(a, b):
            patch.add("replace", path, b)


def bounded_diff(old: Any, new: Any, limits: DiffLimits) -> BoundedDiff:
    """The patch turning ``old`` into ``new``, or why there is none."""
    try:
        # The depth check comes first: ``==`` and ``json.dumps`` on the values
        # below recurse in C, safe only on values known to be shallow.
        if json_too_deep(old, limits.max_depth) or json_too_deep(new, limits.max_depth):
            return BoundedDiff(None, TOO_DEEP)
        clock = _Clock(limits.max_seconds)
        patch = _Patch(limits.max_bytes)
        _walk(old, new, patch, clock)
    except _Stop as stop:
        return BoundedDiff(None, stop.reason)
    return BoundedDiff(patch.ops)
