"""A readable line diff of two JSON values, for people: pretty-printed, changed
lines highlighted, long unchanged stretches folded."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

CONTEXT = 3  # unchanged lines kept around each change
FOLD_AT = 2 * CONTEXT + 2


@dataclass(frozen=True)
class Row:
    kind: str  # "same", "add", "del" or "fold"
    text: str = ""
    lines: tuple[str, ...] = ()  # what a fold hides


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def line_diff(old: Any, new: Any) -> list[Row]:
    before, after = pretty(old).splitlines(), pretty(new).splitlines()
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    opcodes = matcher.get_opcodes()
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
        rows += [Row("del", line) for line in before[i1:i2]]
        rows += [Row("add", line) for line in after[j1:j2]]
    return rows
