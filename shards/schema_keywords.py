# jsonschema builds its validator classes at run time (VALIDATORS, META_SCHEMA,
# ...), and referencing's stubs lag its keyword arguments: mypy cannot see them.
# mypy: disable-error-code="attr-defined,call-arg"
"""The safe, metered keywords a shard's ``value_schema`` is validated with.

The validator class of each draft, with ``pattern``, ``patternProperties`` and
``additionalProperties`` matched by RE2 (linear time), ``uniqueItems`` and long
``enum`` compared by canonical form (linear time), every keyword spending steps
of the current validation's budget, and a registry that retrieves nothing.
Separate from ``shards.value_schema`` (which builds, checks and caches
validators from these, and answers the API) so that each module holds one
thing: this one, how a keyword runs; that one, which schemas are accepted.
"""

from __future__ import annotations

import contextvars
import functools
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import re2
import referencing
import referencing.exceptions
from jsonschema import FormatChecker, ValidationError, validators

from common.errors import ErrorCode

# Every keyword applied spends a step, and so does every item or property a
# keyword walks (``items``, ``properties``, ...); each CLOCK_EVERY steps the
# validation's CPU time is compared with its budget (ZEROLOCK_SCHEMA_BUDGET_MS).
# Time, not steps alone, is the bound: a step that fails an anyOf branch costs
# 20 times one that passes a type check (bench/schema_cost.py).
CLOCK_EVERY = 64
# Keywords that walk the items or properties of the value they are given.
_WALKERS = frozenset(
    {
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "unevaluatedItems",
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
        "dependentSchemas",
        "dependentRequired",
        "dependencies",
        "required",
    }
)
# Enums at least this long are looked up by canonical form instead of compared one by one.
_ENUM_LOOKUP_FROM = 8
# Distinct schemas kept built; a commit looks its shard's schema up here.
VALIDATOR_CACHE_SIZE = 256
# Distinct compiled patterns kept.
REGEX_CACHE_SIZE = 1024
RE2_SYNTAX = "https://github.com/google/re2/wiki/Syntax"


class _Refused(Exception):
    """The schema cannot be used safely; ``reason`` says why (no outside content),
    ``code`` is the refusal's error code."""

    def __init__(self, reason: str, code: ErrorCode = ErrorCode.VALIDATION_ERROR) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class _TooCostly(Exception):
    """The CPU budget of one validation ran out."""


# --- regular expressions: RE2 ---------------------------------------------------


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print the refused pattern to stderr
    return options


_RE2_OPTIONS = _re2_options()


# ECMA-262 (JSON Schema's regex dialect) and Python write a code point \u0041 or
# \u{1F600}; RE2 writes \x{0041}. An escaped backslash is consumed first, so
# \\u0041 stays a backslash followed by "u0041". (Python's re is safe here: the
# pattern has no nested quantifier.)
_UNICODE_ESCAPE = re.compile(r"\\\\|\\u([0-9A-Fa-f]{4})|\\u\{([0-9A-Fa-f]{1,6})\}")


def _re2_syntax(pattern: str) -> str:
    return _UNICODE_ESCAPE.sub(
        lambda m: m.group(0) if m.group(0) == "\\\\" else f"\\x{{{m.group(1) or m.group(2)}}}",
        pattern,
    )


@functools.lru_cache(maxsize=REGEX_CACHE_SIZE)
def _regex(pattern: str) -> Any:
    """The compiled pattern, or _Refused when RE2 cannot compile it."""
    try:
        return re2.compile(_re2_syntax(pattern), _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise _Refused(
            f"pattern {pattern!r} is not supported: patterns are matched with RE2 "
            f"(linear time), which has no backreferences (\\1) and no lookaround "
            f"((?=, (?!, (?<=, (?<!); RE2 says: {reason}. Syntax: {RE2_SYNTAX}"
        ) from None
    except UnicodeEncodeError:
        raise _Refused(f"pattern {pattern!r} is not valid Unicode text.") from None


def _found(pattern: str, text: str) -> bool:
    """JSON Schema's ``pattern`` semantics: a match anywhere in the text."""
    try:
        return _regex(pattern).search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate: no pattern matches broken text
        return False


def _is_regex(instance: object) -> bool:
    """``format: regex`` of the metaschema, which checks a schema's own patterns."""
    if isinstance(instance, str):
        _regex(instance)
    return True


# --- keywords overridden in jsonschema's validator classes ----------------------


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _found(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, pattern_properties: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            if _found(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(upstream: Callable[..., Any]) -> Callable[..., Any]:
    """jsonschema finds the properties that no ``patternProperties`` pattern
    covers with Python's ``re``; the same rule here with RE2."""

    def keyword(validator: Any, aP: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        patterns = schema.get("patternProperties")
        if not patterns or not validator.is_type(instance, "object"):
            # No pattern to match: upstream uses no regex.
            yield from upstream(validator, aP, instance, schema) or ()
            return
        properties = schema.get("properties", {})
        extras = [
            key
            for key in instance
            if key not in properties and not any(_found(p, key) for p in patterns)
        ]
        if validator.is_type(aP, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], aP, path=extra)
        elif not aP and extras:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            listed = ", ".join(repr(each) for each in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")

    return keyword


# Steps a schema may take on each tiny probe value at create. Counted, not
# timed: whether a schema is refused, and with which code, must not depend on
# how busy the machine is. A schema without loops needs a few hundred.
PROBE_STEPS = 20_000

# How many Python frames deeper than where it started a probe's validation may
# go. A ref loop that does not descend into the value ({"not": {"$ref": "#"}})
# nests without end; left to Python's recursion limit, the RecursionError is
# sometimes raised inside referencing's Rust map (rpds), which turns it into a
# pyo3 PanicException, a BaseException nobody can rely on catching. So probes
# stop well before the limit, at the same depth whatever the caller's stack.
# A legitimate schema on a probe value (a scalar, [] or {}) nests only as deep
# as its own document (ZEROLOCK_SCHEMA_MAX_DEPTH, 32: about 200 frames).
PROBE_FRAMES = 500


def probe_frame_limit() -> int:
    """The absolute frame depth a probe started here may not reach: this
    frame's depth plus PROBE_FRAMES, and always short of the recursion limit."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back  # type: ignore[assignment]
    return min(depth + PROBE_FRAMES, sys.getrecursionlimit() - 100)


def _deeper_than(frames: int) -> bool:
    try:
        sys._getframe(frames)
    except ValueError:
        return False
    return True


# The current validation's budget: [steps until the clock is read, CPU deadline,
# steps left (probes only; -1: no step cap), the frame depth a probe may not
# reach (probes only)].
_budget: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "value_schema_budget", default=None
)


def _spend(steps: int) -> None:
    budget = _budget.get()
    if budget is None:
        return
    if budget[2] >= 0:
        budget[2] -= steps
        if budget[2] < 0 or _deeper_than(int(budget[3])):
            raise _TooCostly
        return
    budget[0] -= steps
    if budget[0] <= 0:
        budget[0] = CLOCK_EVERY
        if time.thread_time() > budget[1]:
            raise _TooCostly


def _metered(keyword_name: str, upstream: Callable[..., Any]) -> Callable[..., Any]:
    """A keyword that spends steps of the current validation's budget first: one,
    plus one per item or property for the keywords that walk them."""
    walks = keyword_name in _WALKERS

    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _spend(1 + (len(instance) if walks and isinstance(instance, list | dict) else 0))
        return upstream(validator, value, instance, schema)

    return keyword


# --- equality in linear time ------------------------------------------------------


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value with JSON Schema's equality: 1 equals 1.0,
    true is not 1, objects compare without regard to key order."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)  # int and float hash alike when equal
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(canonical(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((key, canonical(item)) for key, item in value.items()))
    return ("z", value)


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array"):
        seen: set[Any] = set()
        for item in instance:
            form = canonical(item)
            if form in seen:
                yield ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(form)


# Canonical sets of the long enums in use, by the list's identity (the entry
# keeps the list alive, so its id is not reused while cached).
_enum_sets: dict[int, tuple[list[Any], frozenset[Any]]] = {}


def _enum_set(enums: list[Any]) -> frozenset[Any]:
    hit = _enum_sets.get(id(enums))
    if hit is None or hit[0] is not enums:
        if len(_enum_sets) >= 4 * VALIDATOR_CACHE_SIZE:
            _enum_sets.clear()
        hit = (enums, frozenset(canonical(each) for each in enums))
        _enum_sets[id(enums)] = hit
    return hit[1]


def _enum(upstream: Callable[..., Any]) -> Callable[..., Any]:
    def keyword(validator: Any, enums: Any, instance: Any, schema: Any) -> Any:
        if not isinstance(enums, list) or len(enums) < _ENUM_LOOKUP_FROM:
            return upstream(validator, enums, instance, schema)
        if canonical(instance) in _enum_set(enums):
            return ()
        return (ValidationError(f"{instance!r} is not one of {enums!r}"),)

    return keyword


def _refuse_retrieval(uri: str) -> referencing.Resource:
    """The registry's retrieve: nothing outside the schema itself, ever."""
    raise referencing.exceptions.NoSuchResource(ref=uri)


_REGISTRY: referencing.Registry = referencing.Registry(retrieve=_refuse_retrieval)


@functools.cache
def _safe_class(base: type) -> type:
    """``base`` (a draft's validator class) with RE2 patterns, linear-time
    equality, and every keyword metered."""
    keywords: dict[str, Callable[..., Any]] = dict(base.VALIDATORS)
    keywords["pattern"] = _pattern
    keywords["patternProperties"] = _pattern_properties
    keywords["additionalProperties"] = _additional_properties(keywords["additionalProperties"])
    if "uniqueItems" in keywords:
        keywords["uniqueItems"] = _unique_items
    keywords["enum"] = _enum(keywords["enum"])
    return validators.extend(
        base, {name: _metered(name, keyword) for name, keyword in keywords.items()}
    )


@functools.cache
def _schema_format_checker(base: type) -> FormatChecker:
    """The formats ``check_schema`` asserts today for this draft, with ``regex``
    judged by RE2 (the patterns must compile where they will run)."""
    checker = FormatChecker(formats=())
    checker.checkers = dict(base.FORMAT_CHECKER.checkers)
    checker.checkers["regex"] = (_is_regex, _Refused)
    return checker
