"""Path globs (coordination/globs.py): matching, and the exact overlap test that
path reservations stand on. No database."""

from __future__ import annotations

import itertools
import time
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import Invalid
from coordination import globs
from coordination.globs import (
    MAX_PATTERN,
    Budget,
    BudgetSpent,
    glob_check,
    glob_match,
    globs_overlap,
    overlap_witness,
)

# --- glob_match, construct by construct ---------------------------------------------

MATCHES = [
    ("src/**/*.py", "src/a.py", True),
    ("src/**/*.py", "src/x/y/a.py", True),
    ("src/**/*.py", "src/a.txt", False),
    ("src/**/*.py", "lib/a.py", False),
    ("src/**/*.py", "src/x/a.txt", False),
    ("src/**", "src", True),
    ("src/**", "src/a", True),
    ("src/**", "src/a/b", True),
    ("src/**", "srcs/a", False),
    ("**", "a", True),
    ("**", "a/b/c", True),
    ("**/a", "a", True),
    ("**/a", "x/y/a", True),
    ("**/a", "x/y/b", False),
    ("a/**/b", "a/b", True),
    ("a/**/b", "a/x/y/b", True),
    ("a/**/b", "a/x/y/c", False),
    ("a/**/**/b", "a/b", True),
    ("*", "abc", True),
    ("*", "a/b", False),
    ("a*", "a", True),
    ("a*c", "abbbc", True),
    ("a*c", "abbb", False),
    ("a**b", "axxb", True),
    ("a**b", "ax/xb", False),
    ("?", "a", True),
    ("?", "ab", False),
    ("a?c", "abc", True),
    ("a?c", "a/c", False),
    ("[!a]", "b", True),
    ("[!a]", "a", False),
    ("[^a]", "a", False),
    ("[a-c]", "b", True),
    ("[a-c]", "d", False),
    ("[]]", "]", True),
    ("[!]]", "]", False),
    ("[a-]", "-", True),
    ("[\\]x]", "]", True),
    ("\\*", "*", True),
    ("\\*", "a", False),
    ("\\?", "?", True),
    ("\\[a]", "[a]", True),
    ("a\\\\b", "a\\b", True),
    ("src/a.py", "src/a.py", True),
    ("src/a.py", "src/a.pyc", False),
    ("é/*", "é/ü", True),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), MATCHES)
def test_glob_match_follows_each_construct(pattern, path, expected):
    assert glob_match(pattern, path) is expected


@pytest.mark.parametrize("path", ["", "/a", "a/", "a//b", "./a", "a/..", "a\x00", "a\nb", 7])
def test_glob_match_says_no_to_what_is_not_a_path(path):
    assert glob_match("**", path) is False


# --- overlap ------------------------------------------------------------------------

OVERLAPS = [
    ("src/**/*.py", "src/app/*.py", True),
    ("*.py", "*.js", False),
    ("src/*", "src/*/x", False),
    ("**", "a", True),
    ("**", "src/app/*.py", True),
    ("**", "[a]/b/c/[!x]?*", True),
    ("a/[bc]", "a/[!b]", True),
    ("a/[b]", "a/[!b]", False),
    ("src/**", "src", True),
    ("src/**", "lib/**", False),
    ("**/test_*.py", "tests/**", True),
    ("*a*", "*b*", True),
    ("a*", "*b", True),
    ("\\*", "?", True),
    ("\\*", "a", False),
    ("[.]", "?", False),  # the one common path, ".", is no path
    ("[.][.]", "**", False),
]


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAPS)
def test_overlap_is_decided_exactly_and_its_witness_matches_both(a, b, expected):
    witness = overlap_witness(a, b)
    assert (witness is not None) is expected
    assert globs_overlap(a, b) is expected
    assert globs_overlap(b, a) is expected
    if witness is not None:
        assert glob_match(a, witness)
        assert glob_match(b, witness)


def test_the_witness_of_a_class_and_its_negation_is_their_one_common_path():
    assert overlap_witness("a/[bc]", "a/[!b]") == "a/c"


def test_a_witness_prefers_letters_to_dots():
    assert overlap_witness("?", "?") == "a"
    assert overlap_witness("[.]*", "*") == ".a"


# --- glob_check ---------------------------------------------------------------------

REFUSED = [
    None,
    3,
    b"src/*",
    "",
    "a" * (MAX_PATTERN + 1),
    "a\x00b",
    "a\tb",
    "a\x7f",
    "a\x85",
    "a\ud800",
    "/src",
    "src/",
    "src//a",
    "./src",
    "src/.",
    "src/../x",
    "..",
    "[ab",
    "a/[",
    "[!",
    "[]",
    "[a/b]",
    "[z-a]",
    "a\\",
    "a\\/b",
    "[a\\",
]


@pytest.mark.parametrize("pattern", REFUSED)
def test_glob_check_refuses_what_is_not_a_pattern(pattern):
    with pytest.raises(Invalid) as refused:
        glob_check(pattern)
    assert refused.value.details["fields"]["patterns"]


@pytest.mark.parametrize("pattern", ["a" * MAX_PATTERN, "**", "src/**/*.py", "[]]", "\\.", "..a"])
def test_glob_check_returns_a_pattern_unchanged(pattern):
    assert glob_check(pattern) == pattern


def test_matching_and_overlap_refuse_bad_patterns_too():
    with pytest.raises(Invalid):
        glob_match("/a", "a")
    with pytest.raises(Invalid):
        overlap_witness("a", "[a")
    with pytest.raises(Invalid):
        globs_overlap("a//b", "a")


# --- properties, against an independent brute-force matcher -------------------------

TOKENS = ["a", "b", "*", "?", "[ab]", "[!a]", "**"]


@cache
def reference_segment(pattern: str, text: str) -> bool:
    """One segment against one pattern segment of TOKENS, by plain recursion."""
    if not pattern:
        return not text
    head = pattern[0]
    if head == "*":
        return reference_segment(pattern[1:], text) or (
            bool(text) and reference_segment(pattern, text[1:])
        )
    if not text:
        return False
    if head == "?":
        return reference_segment(pattern[1:], text[1:])
    if head == "[":
        close = pattern.index("]")
        body = pattern[1:close]
        negated = body.startswith("!")
        members = body[1:] if negated else body
        return (text[0] in members) != negated and reference_segment(pattern[close + 1 :], text[1:])
    return head == text[0] and reference_segment(pattern[1:], text[1:])


def reference_segments(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    if not pattern:
        return not path
    if pattern[0] == "**":
        return reference_segments(pattern[1:], path) or (
            bool(path) and reference_segments(pattern, path[1:])
        )
    return (
        bool(path)
        and reference_segment(pattern[0], path[0])
        and reference_segments(pattern[1:], path[1:])
    )


def reference_match(pattern: str, path: str) -> bool:
    return reference_segments(tuple(pattern.split("/")), tuple(path.split("/")))


def is_a_path(path: str) -> bool:
    return (
        bool(path)
        and all(segment not in ("", ".", "..") for segment in path.split("/"))
        and all(ord(char) >= 0x20 and not 0x7F <= ord(char) <= 0x9F for char in path)
    )


SEGMENTS = ["".join(chars) for size in (1, 2, 3) for chars in itertools.product("abc", repeat=size)]
# Every path over "abc" of 1-3 segments of 1-3 characters: 39 + 39**2 + 39**3.
ALL_PATHS = [
    tuple(segments) for count in (1, 2, 3) for segments in itertools.product(SEGMENTS, repeat=count)
]

patterns = st.lists(
    st.lists(st.sampled_from(TOKENS), min_size=1, max_size=3).map("".join),
    min_size=1,
    max_size=3,
).map("/".join)
paths = st.lists(
    st.text(st.sampled_from("ab") | st.sampled_from("abc"), min_size=1, max_size=3),
    min_size=1,
    max_size=3,
).map("/".join)

EXAMPLES = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@EXAMPLES
@given(pattern=patterns, path=paths)
def test_glob_match_agrees_with_the_brute_force_matcher(pattern, path):
    assert glob_match(pattern, path) is reference_match(pattern, path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=patterns, b=patterns)
def test_overlap_finds_a_witness_whenever_an_enumerated_path_matches_both(a, b):
    pattern_a, pattern_b = tuple(a.split("/")), tuple(b.split("/"))
    common = any(
        reference_segments(pattern_a, path) and reference_segments(pattern_b, path)
        for path in ALL_PATHS
    )
    if common:
        assert overlap_witness(a, b) is not None


@EXAMPLES
@given(a=patterns, b=patterns)
def test_every_witness_is_a_path_both_patterns_match(a, b):
    witness = overlap_witness(a, b)
    if witness is not None:
        assert is_a_path(witness)
        assert reference_match(a, witness)
        assert reference_match(b, witness)


@EXAMPLES
@given(a=patterns, b=patterns)
def test_overlap_is_symmetric(a, b):
    assert globs_overlap(a, b) is globs_overlap(b, a)


# --- cost ---------------------------------------------------------------------------


def full_length(segments: list[str]) -> str:
    pattern = "/".join(segments)[:MAX_PATTERN].rstrip("/")
    assert len(pattern) >= MAX_PATTERN - 4
    return glob_check(pattern)


PATHOLOGICAL = [
    (full_length(["**", "*a*"] * 70), full_length(["*b*", "**"] * 70)),
    (full_length(["*"] * 130), full_length(["**", "*"] * 70)),
    ("*?" * 128, "?*" * 128),
    ("*a" * 128, "*a" * 127 + "*b"),
    (full_length(["**", "*a*b*"] * 50), full_length(["*b*a*", "**"] * 50)),
    (full_length(["**", "*a*"] * 70), full_length(["*a*c", "**"] * 70)),
]


@pytest.mark.parametrize(("a", "b"), PATHOLOGICAL)
def test_two_pathological_full_length_patterns_are_decided_quickly(a, b):
    started = time.perf_counter()
    witness = overlap_witness(a, b)
    assert time.perf_counter() - started < 2
    if witness is not None:
        assert glob_match(a, witness) and glob_match(b, witness)


# --- cost: every call spends from a budget, and a spent budget decides nothing ---------

COSTLY_A = "*x" * 127 + "y"
COSTLY_B = "*x" * 127 + "z"


@pytest.fixture
def nothing_remembered():
    globs._WITNESSES.clear()
    yield
    globs._WITNESSES.clear()


def spent(call, *args):
    budget = Budget(10**9)
    call(*args, budget)
    return budget.steps - budget.left


def test_patterns_with_different_literal_starts_cost_one_step(nothing_remembered):
    assert spent(overlap_witness, "src/api/**/*.py", "docs/**") == 1
    assert spent(overlap_witness, "src/\\*/a", "src/b/**") == 1
    assert spent(glob_match, "src/api/**/*.py", "docs/a/b/c.py") == 1


def test_ordinary_patterns_cost_a_few_dozen_steps(nothing_remembered):
    assert spent(overlap_witness, "src/**/*.py", "src/app/*.py") < 200
    assert spent(glob_match, "src/**/*.py", "src/a/b/c/d.py") < 200


def test_an_answer_found_is_remembered_and_then_costs_one_step(nothing_remembered):
    first = spent(overlap_witness, COSTLY_A, COSTLY_B)
    assert first > 50_000
    assert spent(overlap_witness, COSTLY_A, COSTLY_B) == 1


def test_a_spent_budget_raises_and_leaves_nothing_remembered(nothing_remembered):
    with pytest.raises(BudgetSpent) as raised:
        overlap_witness(COSTLY_A, COSTLY_B, Budget(10_000))
    assert raised.value.steps == 10_000
    assert (COSTLY_A, COSTLY_B) not in globs._WITNESSES
    with pytest.raises(BudgetSpent):
        glob_match(COSTLY_A, "x" * 4095 + "z", Budget(10_000))


def test_matching_a_long_path_against_a_costly_pattern_is_held_to_the_budget():
    started = time.perf_counter()
    with pytest.raises(BudgetSpent):
        glob_match(COSTLY_A, "x" * 4095 + "z", Budget(50_000))
    assert time.perf_counter() - started < 1  # unbudgeted, this match takes about 1 s


@EXAMPLES
@given(a=patterns, b=patterns, path=paths)
def test_a_budget_that_suffices_changes_no_answer(a, b, path):
    globs._WITNESSES.pop((a, b), None)
    assert overlap_witness(a, b, Budget(10**6)) == overlap_witness(a, b)
    assert glob_match(a, path, Budget(10**6)) == glob_match(a, path)
