"""What an officer reads before deciding: a change summary built from the
server's RFC 6902 patch, and line-and-word diffs of text.

The summary has one row per JSON path with its old and new value; an ``add``
at the end of an array reads as an append. Old values are read by applying the
patch one operation at a time, so a later operation on a shifted array index
still shows the element it really touches.

Bounded: the patch itself is capped at request time (``approvals/diffs.py``),
the summary shows at most ``limit`` rows and says how many more there are, and
text diffs compare at most ``MAX_TEXT_COMPARED`` line pairs and ``MAX_TOKENS``
words per line pair."""

from __future__ import annotations

import copy
import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

SUMMARY_LIMIT = 20
SHORT_VALUE = 160  # characters of a value's JSON shown in a summary cell
MAX_TEXT_COMPARED = 250_000  # line pairs difflib may compare in one text diff
MAX_TOKENS = 2_000  # per line, for the word-level comparison
UNCHANGED_KEPT = 2  # unchanged lines kept around a change in a text diff

_MISSING = object()
# Words, runs of whitespace, and single punctuation marks: "EUR 1,000" ->
# "EUR", " ", "1", ",", "000", so 1,000 -> 10,000 marks just "1" -> "10".
_TOKEN = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)


@dataclass(frozen=True)
class Segment:
    text: str
    changed: bool = False


@dataclass(frozen=True)
class TextLine:
    kind: str  # "same", "del", "add" or "fold" (text: how many lines are hidden)
    segments: tuple[Segment, ...] = ()
    text: str = ""


@dataclass(frozen=True)
class SummaryRow:
    op: str  # "add", "remove", "replace", "append", "move", "copy", "test"
    path: str  # JSON Pointer ("" is the whole value)
    parent: str
    old: str = ""  # short JSON, empty when there was none
    new: str = ""
    text: tuple[TextLine, ...] = ()  # a line diff when a string became a string

    @property
    def where(self) -> str:
        return self.path or "(the whole value)"


@dataclass(frozen=True)
class Summary:
    rows: list[SummaryRow] = field(default_factory=list)
    more: int = 0  # rows left out past the limit


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _tokens(pointer: str) -> list[str]:
    return [_unescape(t) for t in pointer.split("/")[1:]] if pointer else []


def _parent(pointer: str) -> str:
    return pointer.rsplit("/", 1)[0] if pointer else ""


def _resolve(document: Any, pointer: str) -> Any:
    node = document
    for token in _tokens(pointer):
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return _MISSING
    return node


def _short(value: Any) -> str:
    if value is _MISSING:
        return ""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= SHORT_VALUE else text[: SHORT_VALUE - 1] + "…"


def _apply(document: Any, op: dict[str, Any]) -> Any:
    """One operation, in place where possible; returns the new document. An
    operation that does not fit (it should not happen: the server made the
    patch from this document) leaves the document as it was."""
    name, tokens = op.get("op"), _tokens(op.get("path", ""))
    if name in ("move", "copy"):
        value = _resolve(document, op.get("from", ""))
        if value is _MISSING:
            return document
        if name == "move":
            document = _apply(document, {"op": "remove", "path": op["from"]})
        return _apply(document, {"op": "add", "path": op["path"], "value": copy.deepcopy(value)})
    if name == "test":
        return document
    if not tokens:
        return copy.deepcopy(op.get("value")) if name in ("add", "replace") else None
    parent = _resolve(document, _parent(op["path"]))
    last = tokens[-1]
    if isinstance(parent, dict):
        if name == "remove":
            parent.pop(last, None)
        else:
            parent[last] = copy.deepcopy(op.get("value"))
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else int(last) if last.isdigit() else -1
        if not 0 <= index <= len(parent):
            return document
        if name == "add":
            parent.insert(index, copy.deepcopy(op.get("value")))
        elif index < len(parent):
            if name == "remove":
                del parent[index]
            else:
                parent[index] = copy.deepcopy(op.get("value"))
    return document


def change_summary(
    patch: list[dict[str, Any]], base: Any, *, limit: int = SUMMARY_LIMIT
) -> Summary:
    """One row per operation of ``patch`` (made from ``base``), at most ``limit``."""
    document = copy.deepcopy(base)
    rows: list[SummaryRow] = []
    for op in patch[:limit]:
        path, name = op.get("path", ""), op.get("op", "")
        old = _resolve(document, path) if name in ("remove", "replace") else _MISSING
        new = op.get("value", _MISSING)
        if name in ("move", "copy"):
            new = _resolve(document, op.get("from", ""))
        if name == "add":
            container = _resolve(document, _parent(path))
            last = path.rsplit("/", 1)[-1]
            if isinstance(container, list) and (
                last == "-" or (last.isdigit() and int(last) == len(container))
            ):
                name = "append"
            elif isinstance(container, dict) and _unescape(last) in container:
                old = container[_unescape(last)]  # add over an existing member replaces it
        text: tuple[TextLine, ...] = ()
        if isinstance(old, str) and isinstance(new, str):
            text = tuple(text_diff(old, new))
        rows.append(
            SummaryRow(
                op=name,
                path=path,
                parent=_parent(path),
                old=_short(old),
                new=_short(new),
                text=text,
            )
        )
        document = _apply(document, op)
    return Summary(rows, max(0, len(patch) - limit))


def word_segments(old: str, new: str) -> tuple[tuple[Segment, ...], tuple[Segment, ...]]:
    """The two lines split into runs, the runs that differ marked ``changed``."""
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    if len(a) > MAX_TOKENS or len(b) > MAX_TOKENS:
        return (Segment(old, True),), (Segment(new, True),)
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    left: list[Segment] = []
    right: list[Segment] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            left.append(Segment("".join(a[i1:i2])))
            right.append(Segment("".join(b[j1:j2])))
            continue
        if i2 > i1:
            left.append(Segment("".join(a[i1:i2]), True))
        if j2 > j1:
            right.append(Segment("".join(b[j1:j2]), True))
    return _merged(left), _merged(right)


def _merged(segments: list[Segment]) -> tuple[Segment, ...]:
    out: list[Segment] = []
    for segment in segments:
        if out and out[-1].changed == segment.changed:
            out[-1] = Segment(out[-1].text + segment.text, segment.changed)
        else:
            out.append(segment)
    return tuple(out)


def text_diff(old: str, new: str) -> list[TextLine]:
    """A line diff of two strings, newlines as line breaks, replaced lines
    paired up and marked word by word; long unchanged stretches folded."""
    before, after = old.split("\n"), new.split("\n")
    if len(before) * len(after) > MAX_TEXT_COMPARED:
        return [
            TextLine(
                "fold",
                text=f"{len(before):,} lines changed into {len(after):,}: too long to compare here",
            )
        ]
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    opcodes = matcher.get_opcodes()
    lines: list[TextLine] = []
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal":
            same = before[i1:i2]
            head = UNCHANGED_KEPT if index > 0 else 0
            tail = UNCHANGED_KEPT if index < len(opcodes) - 1 else 0
            if len(same) > head + tail + 1:
                lines += [TextLine("same", (Segment(s),)) for s in same[:head]]
                lines.append(TextLine("fold", text=f"{len(same) - head - tail} unchanged lines"))
                lines += [TextLine("same", (Segment(s),)) for s in same[len(same) - tail :]]
            else:
                lines += [TextLine("same", (Segment(s),)) for s in same]
            continue
        removed, added = before[i1:i2], after[j1:j2]
        paired = min(len(removed), len(added)) if tag == "replace" else 0
        dels: list[TextLine] = []
        adds: list[TextLine] = []
        for k in range(paired):
            left, right = word_segments(removed[k], added[k])
            dels.append(TextLine("del", left))
            adds.append(TextLine("add", right))
        dels += [TextLine("del", (Segment(s, True),)) for s in removed[paired:]]
        adds += [TextLine("add", (Segment(s, True),)) for s in added[paired:]]
        lines += dels + adds
    return lines


def first_change(patch: list[dict[str, Any]] | None, base: Any) -> tuple[SummaryRow | None, int]:
    """The first row of the summary and how many more, without copying ``base``
    (the queue shows one line per request). The first operation applies to
    ``base`` itself, so its old value is read there directly."""
    if not patch:
        return None, 0
    op = patch[0]
    path, name = op.get("path", ""), op.get("op", "")
    old = _resolve(base, path) if name in ("remove", "replace") else _MISSING
    new = op.get("value", _MISSING)
    if name in ("move", "copy"):
        new = _resolve(base, op.get("from", ""))
    if name == "add":
        container = _resolve(base, _parent(path))
        last = path.rsplit("/", 1)[-1]
        if isinstance(container, list) and (
            last == "-" or (last.isdigit() and int(last) == len(container))
        ):
            name = "append"
    if isinstance(old, str) and isinstance(new, str):
        old, new = text_window(old, new)
    row = SummaryRow(op=name, path=path, parent=_parent(path), old=_short(old), new=_short(new))
    return row, len(patch) - 1


PREVIEW_LEAD = 12  # characters kept before the first difference
PREVIEW_SPAN = 28


def text_window(old: str, new: str) -> tuple[str, str]:
    """The stretch of two texts where they first differ, "…" marking what is cut:
    a preview that shows the start of two policies 2,000 characters long shows
    two equal openings, and the officer learns nothing."""
    same = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        same += 1
    start = max(0, same - PREVIEW_LEAD)

    def cut(text: str) -> str:
        piece = text[start : start + PREVIEW_SPAN]
        return ("…" if start else "") + piece + ("…" if start + PREVIEW_SPAN < len(text) else "")

    return cut(old), cut(new)
