"""Path globs for path reservations: can two patterns match a common path?

Agent A reserves ``src/**/*.py``; agent B asking for ``src/app/*.py`` is refused,
because some path (``src/app/a.py``) matches both. ``overlap_witness`` decides
this exactly and names such a path; pure Python, no Django models, no ``re``.

Paths
    ``/``-separated and relative: one or more segments, none empty, none ``.``
    or ``..``, no leading ``/``, no control character (Unicode category Cc:
    U+0000-U+001F, U+007F-U+009F) and no lone surrogate (U+D800-U+DFFF).
    Any other character may appear in a segment. ``glob_match`` answers False
    for a string that is not such a path.

Patterns (``glob_check`` refuses every other shape)
    ``/`` always separates segments, even inside ``[...]`` or after ``\\``
    (so ``[a/b]`` is an unclosed ``[`` and ``a\\/b`` a trailing lone ``\\``).

    - ``*`` matches any run, possibly empty, of characters other than ``/``.
    - ``?`` matches exactly one character other than ``/``.
    - ``[...]`` matches one character (never ``/``) of the class; ``[!...]`` or
      ``[^...]`` one character not in it (and not ``/``). ``a-z`` is a range
      (a reversed range such as ``z-a`` is refused); a ``]`` first in the class
      (after any ``!``/``^``) is literal, as is a ``-`` first or last; ``\\``
      escapes inside a class too. An unclosed ``[`` is refused.
    - ``\\`` makes the next character literal (``\\*`` is a star); a trailing
      lone ``\\`` is refused.
    - ``**`` as a whole segment matches zero or more whole segments:
      ``src/**/*.py`` matches ``src/a.py`` and ``src/x/y/a.py``; ``**/a``
      matches ``a``. The choice for a trailing ``/**``: ``src/**`` matches
      ``src/a``, ``src/a/b`` **and ``src`` itself** (reserving a directory's
      contents reserves the directory's own name). ``**`` alone matches every
      path. Only a segment of exactly two stars is this; ``a**b`` or ``***``
      behave as ``*``, and consecutive ``**`` segments as one.
    - Any other character matches itself.

    A pattern is 1 to ``MAX_PATTERN`` characters, no control character, no
    lone surrogate, no leading ``/`` and no empty, ``.`` or ``..`` segment.
    (A segment such as ``\\.`` passes, and matches no path.)

Method
    Each pattern compiles to an NFA over characters whose transition labels are
    sets of code points, sorted tuples of disjoint closed intervals over
    [0, 0x10FFFF], with epsilon moves for ``*`` runs and ``**`` segments.
    ``glob_match`` simulates the NFA on the path. ``overlap_witness`` searches
    breadth first the product of the two NFAs and a four-state automaton that
    accepts exactly the valid paths (no empty, ``.`` or ``..`` segment), stepping
    on the intersection of two labels split into three classes (``/``, ``.``,
    anything else): the product is exact, so None means no valid path matches
    both, and a witness is itself a valid path, the shortest there is (letters
    a-z are preferred for its characters). Its cost is bounded: a pattern has
    O(len) states, so the search visits at most 4 * O(len(a) * len(b)) nodes,
    each label intersection linear in the labels' interval counts.

Cost
    Bounded is not cheap: two pathological 256-character patterns take about
    0.1 s to tell apart, and matching one against a 4096-character path about
    1 s, so a request comparing many of them could hold a CPU for minutes. A
    caller passes a ``Budget``: each call spends the moves it tries (matching:
    the moves out of every current state, per character; the search: the move
    pairs out of every node it visits) and raises ``BudgetSpent`` once the
    budget is gone, with nothing decided. Counting steps, not seconds, makes
    the same request spend the same on any machine. Cheap shortcuts spend
    nothing more: patterns whose leading literal segments differ cannot overlap,
    and a path must begin with a pattern's literal segments to match it; and
    overlap answers already found are remembered. Every call still spends one
    step, so comparing many patterns is never free.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from common.errors import Invalid

MAX_PATTERN: Final = 256
MAX_CODE_POINT: Final = 0x10FFFF

Interval = tuple[int, int]
Label = tuple[Interval, ...]

_SLASH: Final = ord("/")
_DOT: Final = ord(".")

# Characters no path holds: the controls (Cc) and the lone surrogates.
_FORBIDDEN: Final[Label] = ((0x00, 0x1F), (0x7F, 0x9F), (0xD800, 0xDFFF))


def _label_union(intervals: list[Interval]) -> Label:
    """The sorted, disjoint, merged form of any intervals."""
    merged: list[Interval] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _label_complement(label: Label) -> Label:
    out: list[Interval] = []
    low = 0
    for lo, hi in label:
        if lo > low:
            out.append((low, lo - 1))
        low = hi + 1
    if low <= MAX_CODE_POINT:
        out.append((low, MAX_CODE_POINT))
    return tuple(out)


def _label_intersection(a: Label, b: Label) -> Label:
    """Linear merge of two sorted interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def _label_contains(label: Label, code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in label)


# Every character a path segment may hold: not "/", no control, no surrogate.
SEGMENT_CHARS: Final[Label] = _label_complement(_label_union([*_FORBIDDEN, (_SLASH, _SLASH)]))
_SLASH_LABEL: Final[Label] = ((_SLASH, _SLASH),)
_NOT_DOT: Final[Label] = _label_complement(((_DOT, _DOT),))
_PREFERRED: Final[tuple[Label, ...]] = (
    ((ord("a"), ord("z")),),
    ((ord("A"), ord("Z")),),
    ((ord("0"), ord("9")),),
)


def _is_forbidden(char: str) -> bool:
    return _label_contains(_FORBIDDEN, ord(char))


def _invalid(message: str) -> Invalid:
    return Invalid(f"Invalid path pattern: {message}", fields={"patterns": [message]})


# A segment's tokens: a label (one character from a set) or _STAR (a run).
_STAR: Final = "*"
_GLOBSTAR: Final = "**"
Token = Label | str
Segment = tuple[Token, ...] | str  # a token tuple, or _GLOBSTAR


def _parse_class(segment: str, start: int) -> tuple[Label, int]:
    """The class opening at ``segment[start] == "["``: its label (without
    "/") and the index after its "]"; ValueError if it is malformed."""
    i = start + 1
    negate = i < len(segment) and segment[i] in "!^"
    if negate:
        i += 1
    items: list[Interval] = []
    first = True
    while True:
        if i >= len(segment):
            raise ValueError("unclosed '['")
        char = segment[i]
        if char == "]" and not first:
            i += 1
            break
        first = False
        if char == "\\":
            if i + 1 >= len(segment):
                raise ValueError("unclosed '['")
            i += 1
            char = segment[i]
        i += 1
        low = ord(char)
        if i + 1 < len(segment) and segment[i] == "-" and segment[i + 1] != "]":
            high_char = segment[i + 1]
            i += 2
            if high_char == "\\":
                if i >= len(segment):
                    raise ValueError("unclosed '['")
                high_char = segment[i]
                i += 1
            high = ord(high_char)
            if high < low:
                raise ValueError(f"reversed range '{char}-{high_char}' in '[...]'")
            items.append((low, high))
        else:
            items.append((low, low))
    label = _label_union(items)
    if negate:
        label = _label_complement(label)
    return _label_intersection(label, SEGMENT_CHARS), i


def _parse_segment(segment: str) -> Segment:
    if segment == "**":
        return _GLOBSTAR
    tokens: list[Token] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            if not tokens or tokens[-1] != _STAR:
                tokens.append(_STAR)
            i += 1
        elif char == "?":
            tokens.append(SEGMENT_CHARS)
            i += 1
        elif char == "[":
            label, i = _parse_class(segment, i)
            tokens.append(label)
        else:
            if char == "\\":
                if i + 1 >= len(segment):
                    raise ValueError("trailing lone '\\'")
                i += 1
                char = segment[i]
            code = ord(char)
            tokens.append(((code, code),))
            i += 1
    return tuple(tokens)


def _parse(pattern: Any) -> tuple[Segment, ...]:
    """The pattern's segments, consecutive "**" folded into one; raises Invalid."""
    if not isinstance(pattern, str):
        raise _invalid("a pattern must be a string")
    if not pattern:
        raise _invalid("a pattern must not be empty")
    if len(pattern) > MAX_PATTERN:
        raise _invalid(f"a pattern is at most {MAX_PATTERN} characters")
    if any(_is_forbidden(char) for char in pattern):
        raise _invalid("a pattern must not hold control characters or lone surrogates")
    if pattern.startswith("/"):
        raise _invalid("a pattern is relative: no leading '/'")
    segments: list[Segment] = []
    for raw in pattern.split("/"):
        if raw in ("", ".", ".."):
            raise _invalid("a pattern must not hold empty, '.' or '..' segments")
        try:
            segment = _parse_segment(raw)
        except ValueError as error:
            raise _invalid(str(error)) from None
        if not (segment == _GLOBSTAR and segments and segments[-1] == _GLOBSTAR):
            segments.append(segment)
    return tuple(segments)


@lru_cache(maxsize=1024)
def _head(pattern: str) -> tuple[str, ...]:
    """The pattern's leading literal segments: every path it matches begins
    with exactly these segments (a literal segment matches one path segment,
    and "**" can only come after them)."""
    head: list[str] = []
    for segment in _parse(pattern):
        if isinstance(segment, str):  # "**"
            break
        chars = [_single(token) for token in segment]
        if None in chars:
            break
        head.append("".join(c for c in chars if c is not None))
    return tuple(head)


def _single(token: Token) -> str | None:
    """The one character a token matches, if it matches only one."""
    if isinstance(token, str) or len(token) != 1 or token[0][0] != token[0][1]:
        return None
    return chr(token[0][0])


def _heads_differ(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return any(x != y for x, y in zip(a, b, strict=False))


class BudgetSpent(Exception):
    """The Budget ran out before the answer was known."""

    def __init__(self, steps: int) -> None:
        super().__init__(f"glob budget of {steps} steps spent")
        self.steps = steps


class Budget:
    """The glob steps one request may spend (the module docstring, "Cost")."""

    __slots__ = ("left", "steps")

    def __init__(self, steps: int) -> None:
        self.steps = self.left = steps

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise BudgetSpent(self.steps)


def glob_check(pattern: Any) -> str:
    """The pattern, if it is one (see the module docstring); raises Invalid."""
    _parse(pattern)
    assert isinstance(pattern, str)
    return pattern


@dataclass(frozen=True, slots=True)
class _Nfa:
    """``moves[q]``: the moves out of q's epsilon closure, each the index of
    its label in ``labels`` and its target; ``accepting[q]``: whether that
    closure holds the accepting state."""

    start: int
    labels: tuple[Label, ...]
    moves: tuple[tuple[tuple[int, int], ...], ...]
    accepting: tuple[bool, ...]


@lru_cache(maxsize=1024)
def _compile(pattern: str) -> _Nfa:
    segments = _parse(pattern)
    eps: list[list[int]] = []
    edges: list[list[tuple[Label, int]]] = []

    def new() -> int:
        eps.append([])
        edges.append([])
        return len(eps) - 1

    # boundary[i][started]: before segment i; started: a segment was already
    # read, so the next one needs its "/" first.
    boundary = [(new(), new()) for _ in range(len(segments) + 1)]
    for i, segment in enumerate(segments):
        fresh, started = boundary[i]
        next_fresh, next_started = boundary[i + 1]
        entry = new()  # at the first character of a segment
        edges[started].append((_SLASH_LABEL, entry))
        eps[fresh].append(entry)
        if segment == _GLOBSTAR:
            eps[fresh].append(next_fresh)
            eps[started].append(next_started)
            inside = new()
            edges[entry].append((SEGMENT_CHARS, inside))
            edges[inside].append((SEGMENT_CHARS, inside))
            eps[inside].append(started)  # one whole segment read: again, or on
            continue
        current = entry
        for token in segment:
            if token == _STAR:
                edges[current].append((SEGMENT_CHARS, current))
            else:
                assert not isinstance(token, str)
                after = new()
                edges[current].append((token, after))
                current = after
        eps[current].append(next_started)
    accept = boundary[-1][1]

    labels: dict[Label, int] = {}
    moves: list[tuple[tuple[int, int], ...]] = []
    accepting: list[bool] = []
    for state in range(len(eps)):
        closure = {state}
        stack = [state]
        while stack:
            for target in eps[stack.pop()]:
                if target not in closure:
                    closure.add(target)
                    stack.append(target)
        moves.append(
            tuple(
                dict.fromkeys(
                    (labels.setdefault(label, len(labels)), target)
                    for q in sorted(closure)
                    for label, target in edges[q]
                    if label
                )
            )
        )
        accepting.append(accept in closure)
    return _Nfa(boundary[0][0], tuple(labels), tuple(moves), tuple(accepting))


def is_valid_path(path: Any) -> bool:
    """A relative "/"-separated path: segments non-empty, not "." or "..", no
    control character or lone surrogate."""
    if not isinstance(path, str) or not path:
        return False
    if any(_is_forbidden(char) for char in path):
        return False
    return all(segment not in ("", ".", "..") for segment in path.split("/"))


def glob_match(pattern: str, path: str, budget: Budget | None = None) -> bool:
    """Whether the path matches the pattern (Invalid for a bad pattern; False
    for a string that is not a valid path). Spends from ``budget``, if given."""
    nfa = _compile(glob_check(pattern))
    if budget is not None:
        budget.spend(1)  # a call costs a step, even one the shortcuts answer
    if not is_valid_path(path):
        return False
    head = _head(pattern)
    if tuple(path.split("/", len(head))[: len(head)]) != head:
        return False
    labels, moves = nfa.labels, nfa.moves
    states = {nfa.start}
    for char in path:
        code = ord(char)
        after: set[int] = set()
        tried = 0
        for state in states:
            out = moves[state]
            tried += len(out)
            for label, target in out:
                if _label_contains(labels[label], code):
                    after.add(target)
        if budget is not None:
            budget.spend(tried)
        if not after:
            return False
        states = after
    return any(nfa.accepting[state] for state in states)


# The valid-path automaton: at a segment's start, after "." , after "..", or
# inside a segment that is none of these (the only accepting state).
_V_START, _V_DOT, _V_DOTDOT, _V_OK = 0, 1, 2, 3
_V_ON_DOT: Final = (_V_DOT, _V_DOTDOT, _V_OK, _V_OK)


def _representative(label: Label) -> int | None:
    """A character of the label other than "." and "/", a letter if it can."""
    label = _label_intersection(label, _NOT_DOT)
    if not label:
        return None
    for preferred in _PREFERRED:
        common = _label_intersection(label, preferred)
        if common:
            return common[0][0]
    return label[0][0]


def _classify(a: Label, b: Label) -> tuple[bool, bool, int | None]:
    """Of the characters in both labels: whether "/" is one, whether "." is
    one, and one that is neither (None if there is none)."""
    common = _label_intersection(a, b)
    return _label_contains(common, _SLASH), _label_contains(common, _DOT), _representative(common)


# Overlap answers found, by pattern pair; cleared whole when full (a dict's
# single operations are safe across threads without a lock).
_WITNESSES: dict[tuple[str, str], str | None] = {}
_WITNESSES_MAX: Final = 8192


def overlap_witness(a: str, b: str, budget: Budget | None = None) -> str | None:
    """A valid path both patterns match, the shortest there is; None when no
    path matches both. Raises Invalid for a bad pattern, BudgetSpent when the
    search would spend more than ``budget`` (if given)."""
    nfa_a = _compile(glob_check(a))
    nfa_b = _compile(glob_check(b))
    if budget is not None:
        budget.spend(1)  # a call costs a step, even one the shortcuts answer
    if _heads_differ(_head(a), _head(b)):
        return None
    try:
        return _WITNESSES[a, b]
    except KeyError:
        pass
    witness = _search(nfa_a, nfa_b, budget)
    if len(_WITNESSES) >= _WITNESSES_MAX:
        _WITNESSES.clear()
    _WITNESSES[a, b] = witness
    return witness


def _search(nfa_a: _Nfa, nfa_b: _Nfa, budget: Budget | None) -> str | None:
    Node = tuple[int, int, int]
    first: Node = (nfa_a.start, nfa_b.start, _V_START)
    parents: dict[Node, tuple[Node, int] | None] = {first: None}
    queue: deque[Node] = deque([first])
    classified: dict[tuple[int, int], tuple[bool, bool, int | None]] = {}
    while queue:
        node = queue.popleft()
        qa, qb, v = node
        if budget is not None:
            budget.spend(len(nfa_a.moves[qa]) * len(nfa_b.moves[qb]))
        if v == _V_OK and nfa_a.accepting[qa] and nfa_b.accepting[qb]:
            codes: list[int] = []
            step = parents[node]
            while step is not None:
                node, code = step
                codes.append(code)
                step = parents[node]
            return "".join(map(chr, reversed(codes)))
        for label_a, target_a in nfa_a.moves[qa]:
            for label_b, target_b in nfa_b.moves[qb]:
                pair = (label_a, label_b)
                kinds = classified.get(pair)
                if kinds is None:
                    kinds = _classify(nfa_a.labels[label_a], nfa_b.labels[label_b])
                    classified[pair] = kinds
                slash, dot, other = kinds
                steps: list[tuple[int, int]] = []
                if slash:
                    if v == _V_OK:
                        steps.append((_SLASH, _V_START))
                else:
                    # A letter first: of two witnesses as short, the one
                    # without dots.
                    if other is not None:
                        steps.append((other, _V_OK))
                    if dot:
                        steps.append((_DOT, _V_ON_DOT[v]))
                for code, next_v in steps:
                    child = (target_a, target_b, next_v)
                    if child not in parents:
                        parents[child] = (node, code)
                        queue.append(child)
    return None


def globs_overlap(a: str, b: str, budget: Budget | None = None) -> bool:
    """Whether some path matches both patterns."""
    return overlap_witness(a, b, budget) is not None
