"""A readable line diff of two JSON values, for people: pretty-printed, changed
lines highlighted word by word, each change headed by the JSON path it sits in,
long unchanged stretches folded.

Bounded: ``difflib`` is quadratic in the lines it compares (12,000 lines took
18 s here) and pretty-printing is pure Python, so values above the approval
diff size cap, or deeper than the depth cap, are not printed, and a diff whose
changed middle is too large becomes one "omitted" row saying why."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from common.boundeddiff import json_too_deep

from .review import Segment, word_segments

CONTEXT = 3  # unchanged lines kept around each change
FOLD_AT = 2 * CONTEXT + 2
# Lines left to compare after trimming the common head and tail, one side times
# the other: difflib's cost grows with it (4,000 x 4,000 took 2 s here).
MAX_COMPARED = 1_000_000


@dataclass(frozen=True)
class Row:
    # "same", "add", "del", "fold", "hunk" (text: the JSON path the change below
    # sits in) or "omitted" (text says why)
    kind: str
    text: str = ""
    lines: tuple[str, ...] = ()  # what a fold hides
    segments: tuple[Segment, ...] = ()  # add/del lines paired with a partner: what changed


@dataclass(frozen=True)
class Shown:
    """A value as a page shows it: pretty JSON, or a note saying why not.
    ``paths``: for each line, the JSON Pointer of the object or array it sits in."""

    text: str
    why: str = ""  # empty when ``text`` is the value
    lines: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()


def _pointer_token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def pretty_lines(value: Any, *, split_text: bool = False) -> tuple[list[str], list[str]]:
    """``json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)`` split
    into lines, with the path each line sits in. Only for values already known
    to be within the depth cap (it recurses).

    ``split_text``: a string holding newlines is printed over as many lines
    (the continuation lines indented under it), so a diff of a policy text shows
    the one line that changed instead of one long JSON line full of ``\\n``."""
    lines: list[str] = []
    paths: list[str] = []

    def walk(node: Any, depth: int, where: str, prefix: str, suffix: str, own: str) -> None:
        pad = "  " * depth
        if isinstance(node, dict) and node:
            lines.append(f"{pad}{prefix}{{")
            paths.append(where)
            items = sorted(node.items())
            for index, (key, child) in enumerate(items):
                walk(
                    child,
                    depth + 1,
                    own,
                    json.dumps(key, ensure_ascii=False) + ": ",
                    "," if index < len(items) - 1 else "",
                    f"{own}/{_pointer_token(key)}",
                )
            lines.append(f"{pad}}}{suffix}")
            paths.append(own)
        elif isinstance(node, list) and node:
            lines.append(f"{pad}{prefix}[")
            paths.append(where)
            for index, child in enumerate(node):
                walk(
                    child,
                    depth + 1,
                    own,
                    "",
                    "," if index < len(node) - 1 else "",
                    f"{own}/{index}",
                )
            lines.append(f"{pad}]{suffix}")
            paths.append(own)
        elif split_text and isinstance(node, str) and "\n" in node:
            parts = [json.dumps(part, ensure_ascii=False)[1:-1] for part in node.split("\n")]
            lines.append(f'{pad}{prefix}"{parts[0]}')
            lines.extend(f"{pad}  {part}" for part in parts[1:-1])
            lines.append(f'{pad}  {parts[-1]}"{suffix}')
            # The continuation lines sit in the string itself: a change there is
            # headed by the string's own path ("in /text"), not its parent's.
            paths.extend([where] + [own] * (len(parts) - 1))
        else:
            lines.append(f"{pad}{prefix}{json.dumps(node, ensure_ascii=False)}{suffix}")
            paths.append(where)

    walk(value, 0, "", "", "", "")
    return lines, paths


def shown(value: Any) -> Shown:
    depth = settings.ZEROLOCK_APPROVAL_MAX_DEPTH
    # Depth first: json.dumps recurses in C, safe only on values known shallow.
    if json_too_deep(value, depth):
        why = f"nested more than {depth} levels deep"
    else:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        cap = settings.ZEROLOCK_APPROVAL_DIFF_MAX_BYTES
        if size <= cap:
            # The text is the JSON (the three values); the lines, which the line
            # diff compares, print multi-line strings over several lines.
            lines, paths = pretty_lines(value, split_text=True)
            text = "\n".join(pretty_lines(value)[0])
            return Shown(text, "", tuple(lines), tuple(paths))
        why = f"{size // 1024:,} KiB of JSON, above the {cap // 1024:,} KiB shown here"
    return Shown(f"(not shown here: {why}; the API returns the whole value)", why)


def pretty(value: Any) -> str:
    return shown(value).text


def line_diff(old: Any, new: Any) -> list[Row]:
    return shown_diff(shown(old), shown(new))


def shown_diff(old: Shown, new: Shown) -> list[Row]:
    why = old.why or new.why
    if why:
        return [Row("omitted", f"Diff too large to show: a value is {why}.")]
    # The printed lines, not text.splitlines(): a string may hold U+2028, which
    # JSON leaves as it is and splitlines() would break on.
    before, after = list(old.lines), list(new.lines)
    # The common head and tail are equal by construction; only the middle goes
    # through difflib, so a small change in a large value stays cheap.
    head = 0
    while head < min(len(before), len(after)) and before[head] == after[head]:
        head += 1
    tail = 0
    while (
        tail < min(len(before), len(after)) - head
        and before[len(before) - 1 - tail] == after[len(after) - 1 - tail]
    ):
        tail += 1
    middle_before, middle_after = len(before) - head - tail, len(after) - head - tail
    if middle_before * middle_after > MAX_COMPARED:
        return [
            Row(
                "omitted",
                f"Diff too large to show: {middle_before:,} lines changed into "
                f"{middle_after:,}. The API's diff field has the change as a JSON Patch.",
            )
        ]
    matcher = difflib.SequenceMatcher(
        a=before[head : len(before) - tail], b=after[head : len(after) - tail], autojunk=False
    )
    opcodes = [
        (tag, i1 + head, i2 + head, j1 + head, j2 + head)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]
    if head:
        opcodes.insert(0, ("equal", 0, head, 0, head))
    if tail:
        opcodes.append(("equal", len(before) - tail, len(before), len(after) - tail, len(after)))
    return _rows(before, after, opcodes, old.paths, new.paths)


def _where(path: str) -> str:
    return path or "(top level)"


def _rows(
    before: list[str],
    after: list[str],
    opcodes: list[tuple],
    before_paths: tuple[str, ...] = (),
    after_paths: tuple[str, ...] = (),
) -> list[Row]:
    rows: list[Row] = []
    last_hunk = None
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal":
            same = before[i1:i2]
            head = CONTEXT if index > 0 else 0
            tail = CONTEXT if index < len(opcodes) - 1 else 0
            if len(same) >= FOLD_AT and len(same) > head + tail:
                rows += [Row("same", line) for line in same[:head]]
                rows.append(Row("fold", lines=tuple(same[head : len(same) - tail])))
                rows += [Row("same", line) for line in same[len(same) - tail :]]
            else:
                rows += [Row("same", line) for line in same]
            continue
        # Each change says where it is: the path of the object or array its first
        # line sits in (folding hides the parent keys that would say so).
        paths = after_paths[j1:j2] if j2 > j1 else before_paths[i1:i2]
        where = _where(paths[0]) if paths else ""
        if where and (where != last_hunk or (rows and rows[-1].kind == "fold")):
            rows.append(Row("hunk", where))
            last_hunk = where
        removed, added = before[i1:i2], after[j1:j2]
        paired = min(len(removed), len(added)) if tag == "replace" else 0
        pairs = [word_segments(removed[k], added[k]) for k in range(paired)]
        rows += [Row("del", line, segments=pairs[k][0]) for k, line in enumerate(removed[:paired])]
        rows += [Row("del", line) for line in removed[paired:]]
        rows += [Row("add", line, segments=pairs[k][1]) for k, line in enumerate(added[:paired])]
        rows += [Row("add", line) for line in added[paired:]]
    return rows
