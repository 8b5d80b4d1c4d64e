# jsonschema builds its validator classes at run time (VALIDATORS, META_SCHEMA,
# ...), and referencing's stubs lag its keyword arguments: mypy cannot see them.
# mypy: disable-error-code="attr-defined,call-arg"
"""A shard's ``value_schema``: the one home of JSON Schema handling.

Left to itself, jsonschema fetches any remote ``$ref`` with urllib (no timeout,
``file://`` included: the old 400 of a failing commit echoed a local file) and
matches ``pattern`` with Python's backtracking ``re`` (``^(a+)+$`` against 29
a's held the GIL for 17 s, and the whole server with it). So here:

- references resolve inside the schema's own document only: the registry's
  retrieve function refuses everything, and ``schema_check`` refuses at create
  any ``$ref`` that is not ``#...`` or does not resolve;
- ``pattern``, ``patternProperties`` (also inside ``additionalProperties``) and the
  ``format: regex`` check of a schema's own patterns use RE2, which matches in
  linear time; a pattern RE2 cannot compile (backreferences, lookaround) is
  refused at create;
- every keyword applied while validating one value spends steps of a budget
  (one, plus one per item or property of the value it walks), and the
  validation's CPU time is held to ``ZEROLOCK_SCHEMA_BUDGET_MS``, so nothing a
  schema can say makes validation run without bound: a ``$ref`` loop, a tree of
  refs that doubles at each level, a wide ``anyOf`` over a long array. Past the
  budget the answer is 400 SCHEMA_TOO_COSTLY;
- ``uniqueItems`` and ``enum`` compare values by a canonical, hashable form in
  linear time (jsonschema compares objects pairwise: a 77 KB array took 29.7 s);
- a schema whose ``anyOf``/``oneOf``/``allOf``/refs branch out to more than
  ``ZEROLOCK_SCHEMA_MAX_BRANCHES`` subschemas at one place in the value is
  refused at create (400 SCHEMA_TOO_COSTLY): the width that multiplies every
  item's cost is judged where it is written, not on each commit;
- size and depth of a schema are capped (settings ``ZEROLOCK_SCHEMA_MAX_BYTES``,
  ``ZEROLOCK_SCHEMA_MAX_DEPTH``).

Schemas stored before these rules (a legacy row with a remote ``$ref``) go
through the same checks on every commit: the commit is refused with 400
VALIDATION_ERROR, nothing is fetched. Built validators are cached by the
schema's canonical JSON, since ``value_validate`` runs on every commit.
"""

from __future__ import annotations

import contextvars
import functools
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from django.conf import settings
from jsonschema import FormatChecker, SchemaError, ValidationError, validators
from jsonschema.exceptions import best_match

from common.boundeddiff import json_too_deep
from common.errors import ApiError, ErrorCode, Invalid

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
# Keywords that apply subschemas to the same place in the value (their widths add up).
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
# Enums at least this long are looked up by canonical form instead of compared one by one.
_ENUM_LOOKUP_FROM = 8
# Distinct schemas kept built; a commit looks its shard's schema up here.
VALIDATOR_CACHE_SIZE = 256
# Distinct compiled patterns kept.
REGEX_CACHE_SIZE = 1024
RE2_SYNTAX = "https://github.com/google/re2/wiki/Syntax"
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# Probe values a schema is tried on at create: a ref loop that does not descend
# into the value shows up on one of them whatever the value.
_PROBES: tuple[Any, ...] = (None, True, 0, 1.5, "", [], {})


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

# The current validation's budget: [steps until the clock is read, CPU deadline,
# steps left (probes only; -1: no step cap)].
_budget: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "value_schema_budget", default=None
)


def _spend(steps: int) -> None:
    budget = _budget.get()
    if budget is None:
        return
    if budget[2] >= 0:
        budget[2] -= steps
        if budget[2] < 0:
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


# --- the checks, run once per distinct schema -------------------------------------


Node = tuple[referencing.Resource, Any]  # a subschema and the resolver at its place


def _reachable(root: referencing.Resource, resolver: Any, specification: Any) -> Iterator[Node]:
    """Every subschema validation can reach from the root, through subschema
    keywords and through local refs. Refuses refs that leave the document or
    lead nowhere. (A node's base URI is lexical, so each node is walked once.)"""
    seen: set[int] = set()
    stack = [(root, resolver)]
    while stack:
        resource, scope = stack.pop()
        contents = resource.contents
        if not isinstance(contents, dict) or id(contents) in seen:
            continue
        seen.add(id(contents))
        yield resource, scope
        for keyword in _REF_KEYWORDS:
            ref = contents.get(keyword)
            if not isinstance(ref, str):
                continue
            if not ref.startswith("#"):
                raise _Refused(
                    f"{keyword} {ref!r} points outside the schema: only references "
                    "within the same document (#/$defs/..., #/definitions/..., #anchor) "
                    "are allowed."
                )
            try:
                resolved = scope.lookup(ref)
            except referencing.exceptions.Unresolvable:
                raise _Refused(f"{keyword} {ref!r} does not resolve within the schema.") from None
            target = specification.create_resource(resolved.contents)
            stack.append((target, resolved.resolver))
        for sub in resource.subresources():
            stack.append((sub, scope.in_subresource(sub)))


def _in_place(node: Node, specification: Any) -> Iterator[Node]:
    """The subschemas a node applies to the same place in the value: the
    combinators, the conditionals, dependent schemas and references."""
    resource, scope = node
    contents = resource.contents
    subs: list[Any] = []
    for keyword in _IN_PLACE_LISTS:
        if isinstance(contents.get(keyword), list):
            subs.extend(contents[keyword])
    subs.extend(contents[keyword] for keyword in _IN_PLACE_ONE if keyword in contents)
    for keyword in ("dependentSchemas", "dependencies"):
        if isinstance(contents.get(keyword), dict):
            subs.extend(v for v in contents[keyword].values() if isinstance(v, dict))
    for sub in subs:
        if isinstance(sub, dict):
            child = specification.create_resource(sub)
            yield child, scope.in_subresource(child)
    for keyword in _REF_KEYWORDS:
        if isinstance(contents.get(keyword), str):
            resolved = scope.lookup(contents[keyword])  # _reachable checked it resolves
            yield specification.create_resource(resolved.contents), resolved.resolver


def _width_check(nodes: list[Node], specification: Any) -> None:
    """Refuses a schema that applies more than ZEROLOCK_SCHEMA_MAX_BRANCHES
    subschemas at one place in the value: every item of an array under such a
    place pays for all of them (a 1,000-branch ``anyOf`` over a 2 KB array kept
    the server busy past 60 s)."""
    limit = settings.ZEROLOCK_SCHEMA_MAX_BRANCHES
    widths: dict[int, int] = {}

    def width(node: Node) -> int:
        key = id(node[0].contents)
        if key in widths:
            return widths[key]
        widths[key] = 1  # a loop in place counts once here; the probes refuse real loops
        total = 1
        for child in _in_place(node, specification):
            if isinstance(child[0].contents, dict):
                total += width(child)
            if total > limit:
                break  # counting further changes nothing (and bounds this recursion)
        widths[key] = total
        return total

    for node in nodes:
        if width(node) > limit:
            raise _Refused(
                f"its anyOf/oneOf/allOf and references apply more than {limit} subschemas "
                "at one place in the value (ZEROLOCK_SCHEMA_MAX_BRANCHES), and every item "
                "below that place would pay for all of them; use enum for a long list of "
                "values, or split the shard.",
                code=ErrorCode.SCHEMA_TOO_COSTLY,
            )


@dataclass(frozen=True)
class _Built:
    validator: Any = None
    refusal: _Refused | None = None


def _build(schema: Any) -> _Built:
    try:
        return _Built(validator=_validator(schema))
    except _Refused as refused:
        return _Built(refusal=refused)


def _validator(schema: Any) -> Any:
    max_depth = settings.ZEROLOCK_SCHEMA_MAX_DEPTH
    if json_too_deep(schema, max_depth):
        raise _Refused(f"it nests deeper than {max_depth} levels.")
    base = validators.validator_for(schema)
    try:
        base.check_schema(schema, format_checker=_schema_format_checker(base))
    except SchemaError as exc:
        if isinstance(exc.cause, _Refused):
            raise exc.cause from None
        raise _Refused(f"it is not a valid JSON Schema: {exc.message}") from None
    validator = validator_unchecked(schema)
    if isinstance(schema, dict):
        _static_check(schema, base)
    for probe in _PROBES:
        try:
            _errors(validator, probe, steps=PROBE_STEPS)
        except (_TooCostly, RecursionError):
            raise _Refused(
                "its references loop without end or branch out too far to evaluate "
                f"(tried on the value {json.dumps(probe)})."
            ) from None
    return validator


def validator_unchecked(schema: Any) -> Any:
    """The validator alone, without the checks above: RE2 patterns, budgeted
    refs, and a registry that retrieves nothing. The last line of defence, so it
    must hold by itself (tests/shards/test_schema_safety.py shows it does)."""
    return _safe_class(validators.validator_for(schema))(schema, registry=_REGISTRY)


def _static_check(schema: dict[str, Any], base: type) -> None:
    specification = referencing.jsonschema.specification_with(
        base.ID_OF(base.META_SCHEMA) or "", default=referencing.jsonschema.DRAFT202012
    )
    root = specification.create_resource(schema)
    resolver = _REGISTRY.resolver_with_root(root)
    has_pattern_properties = has_unevaluated_properties = False
    nodes = list(_reachable(root, resolver, specification))
    for resource, _ in nodes:
        contents = resource.contents
        if isinstance(contents.get("pattern"), str):
            _regex(contents["pattern"])
        pattern_properties = contents.get("patternProperties")
        if isinstance(pattern_properties, dict):
            has_pattern_properties = True
            for pattern in pattern_properties:
                _regex(pattern)
        if "unevaluatedProperties" in contents:
            has_unevaluated_properties = True
    if has_pattern_properties and has_unevaluated_properties:
        # jsonschema evaluates this combination with Python's backtracking re
        # (inside unevaluatedProperties), which no keyword override reaches.
        raise _Refused(
            "unevaluatedProperties together with patternProperties is not supported; "
            "use additionalProperties."
        )
    _width_check(nodes, specification)


@functools.lru_cache(maxsize=VALIDATOR_CACHE_SIZE)
def _built(canonical: str, max_depth: int, max_branches: int) -> _Built:
    # The limits are part of the key so that a changed setting is honoured.
    return _build(json.loads(canonical))


def _compiled(schema: Any) -> Any:
    """The safe validator of a schema, or 400 VALIDATION_ERROR."""
    if not isinstance(schema, dict | bool):
        raise Invalid("value_schema must be a JSON Schema object.")
    try:
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        raise Invalid("value_schema is not JSON.") from None
    max_bytes = settings.ZEROLOCK_SCHEMA_MAX_BYTES
    if len(canonical) > max_bytes:
        raise Invalid(
            f"value_schema is {len(canonical)} bytes as compact JSON; at most {max_bytes} "
            "are accepted (ZEROLOCK_SCHEMA_MAX_BYTES).",
        )
    built = _built(
        canonical, settings.ZEROLOCK_SCHEMA_MAX_DEPTH, settings.ZEROLOCK_SCHEMA_MAX_BRANCHES
    )
    if built.refusal is not None:
        raise ApiError(built.refusal.code, f"value_schema is refused: {built.refusal.reason}")
    return built.validator


def _errors(validator: Any, value: Any, *, steps: int = -1) -> ValidationError | None:
    """The best error of ``value`` (None: valid), within the CPU budget, or within
    ``steps`` steps when given (the probes at create)."""
    deadline = time.thread_time() + settings.ZEROLOCK_SCHEMA_BUDGET_MS / 1000
    token = _budget.set([CLOCK_EVERY, deadline, steps])
    try:
        return best_match(validator.iter_errors(value))
    finally:
        _budget.reset(token)


# --- the two entry points -------------------------------------------------------


def schema_check(schema: Any) -> None:
    """400 VALIDATION_ERROR unless the schema is valid, small and safe to run."""
    if schema is None:
        return
    _compiled(schema)


def value_validate(schema: Any, value: Any) -> None:
    """400 SCHEMA_VIOLATION when the value does not satisfy the shard's schema
    (and 400 VALIDATION_ERROR when a stored schema breaks today's rules)."""
    if schema is None:
        return
    validator = _compiled(schema)
    try:
        error = _errors(validator, value)
    except _TooCostly:
        budget_ms = settings.ZEROLOCK_SCHEMA_BUDGET_MS
        raise ApiError(
            ErrorCode.SCHEMA_TOO_COSTLY,
            "Validating this value against the shard's value_schema needs more than "
            f"{budget_ms} ms of CPU (ZEROLOCK_SCHEMA_BUDGET_MS); nothing was written. "
            "Send a smaller value, or simplify the schema.",
            budget_ms=budget_ms,
        ) from None
    except RecursionError:
        raise ApiError(
            ErrorCode.SCHEMA_VIOLATION,
            "Value could not be validated against the shard's value_schema: it nests too deep.",
            path=[],
            validator="$ref",
        ) from None
    except (_Refused, referencing.exceptions.Unresolvable) as exc:
        # Only a stored schema the create-time checks never saw can get here.
        reason = exc.reason if isinstance(exc, _Refused) else "a reference does not resolve."
        raise Invalid(f"The shard's value_schema is refused: {reason}") from None
    if error is not None:
        raise ApiError(
            ErrorCode.SCHEMA_VIOLATION,
            f"Value does not match the shard's value_schema: {error.message}",
            path=list(error.absolute_path),
            validator=error.validator,
        )


# --- additive writes: what they add, checked before the write lock ---------------

# Keywords that say nothing about the value itself (kept on both halves, so that
# references resolve the same way).
_META = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$defs",
        "definitions",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
# Per CRDT type: keywords that hold for the whole value exactly when they hold
# for each thing a write adds (every item of an append, every key a patch sets),
# and the cheap keywords that need the whole value. A schema with any other
# keyword at its root (contains, prefixItems, a root $ref, anyOf, ...) is
# checked whole, under the lock, within the budget.
_PER_PART: dict[str, frozenset[str]] = {
    "array": frozenset({"type", "items"}),
    "map": frozenset(
        {"type", "properties", "patternProperties", "additionalProperties", "propertyNames"}
    ),
}
_WHOLE: dict[str, frozenset[str]] = {
    "array": frozenset({"type", "maxItems", "minItems", "uniqueItems"}),
    "map": frozenset({"type", "required", "maxProperties", "minProperties"}),
}


@dataclass(frozen=True)
class _Split:
    parts: Any  # checked on what the write adds, before the lock
    whole: Any  # checked on the merged value, under it


@functools.lru_cache(maxsize=VALIDATOR_CACHE_SIZE)
def _split(canonical: str, crdt_type: str) -> _Split | None:
    schema = json.loads(canonical)
    if crdt_type not in _PER_PART or not isinstance(schema, dict):
        return None
    per_part, whole = _PER_PART[crdt_type], _WHOLE[crdt_type]
    if not set(schema) <= per_part | whole | _META:
        return None
    if crdt_type == "array" and not isinstance(schema.get("items", True), dict | bool):
        return None  # items as a list (draft 4-7) is positional
    keep = {k: v for k, v in schema.items() if k in _META}
    return _Split(
        parts=keep | {k: v for k, v in schema.items() if k in per_part},
        whole=keep | {k: v for k, v in schema.items() if k in whole},
    )


def _split_of(schema: Any, crdt_type: str) -> _Split | None:
    if schema is None:
        return None
    return _split(json.dumps(schema, sort_keys=True, separators=(",", ":")), crdt_type)


def additions_validate(schema: Any, crdt_type: str, additions: Any) -> bool:
    """Checks what an additive write adds (an append's items, a patch's set keys
    as an object) against the part of the schema that holds item by item, before
    the write lock: that part is what costs, and it does not depend on what other
    writers add meanwhile. True when the schema splits so; the write must then
    still pass ``merged_validate(..., additions_checked=True)`` under the lock.
    False when it does not split: everything is checked under the lock."""
    split = _split_of(schema, crdt_type)
    if split is None:
        return False
    value_validate(split.parts, additions)
    return True


def merged_validate(schema: Any, crdt_type: str, value: Any, *, additions_checked: bool) -> None:
    """The additive shard's merged value, under the write lock: only the cheap
    whole-value keywords when its additions were checked before the lock."""
    split = _split_of(schema, crdt_type) if additions_checked else None
    value_validate(schema if split is None else split.whole, value)
