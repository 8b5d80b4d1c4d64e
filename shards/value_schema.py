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

This module builds, checks and caches validators and answers the API; the
keywords they run with (RE2 patterns, the metered budget, linear-time
equality, the registry that retrieves nothing) are in ``shards.schema_keywords``,
and the split of a schema for additive writes in ``shards.schema_additive``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import referencing
import referencing.exceptions
import referencing.jsonschema
from django.conf import settings
from jsonschema import SchemaError, ValidationError, validators
from jsonschema.exceptions import best_match

from common.boundeddiff import json_too_deep
from common.errors import ApiError, ErrorCode, Invalid

from .schema_keywords import (
    _REGISTRY,
    CLOCK_EVERY,
    PROBE_STEPS,
    VALIDATOR_CACHE_SIZE,
    _budget,
    _Refused,
    _regex,
    _safe_class,
    _schema_format_checker,
    _TooCostly,
    probe_frame_limit,
)

# Keywords that apply subschemas to the same place in the value (their widths add up).
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# Probe values a schema is tried on at create: a ref loop that does not descend
# into the value shows up on one of them whatever the value.
_PROBES: tuple[Any, ...] = (None, True, 0, 1.5, "", [], {})


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
    frames = probe_frame_limit() if steps >= 0 else 0
    token = _budget.set([CLOCK_EVERY, deadline, steps, frames])
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
