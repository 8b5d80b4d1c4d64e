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
- every ``$ref`` followed while validating one value spends one step of a
  budget, so a schema that refers to itself without end, or a tree of refs that
  doubles at each level, answers 400 instead of hanging or 500;
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
from common.errors import ApiError

# $ref follows allowed while validating one value. A tree schema follows one
# per node of the value; a self-reference without end or a ref tree that
# doubles at each level runs out instead of hanging. One step costs about 20 us
# here, so the budget is about 0.2 s: less than a 1 MB value costs to validate
# against a plain schema without refs.
REF_STEP_BUDGET = 10_000
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
    """The schema cannot be used safely; ``reason`` says why (no outside content)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _TooCostly(Exception):
    """The ref-step budget of one validation ran out."""


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


_steps_left: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "value_schema_steps_left", default=None
)


def _budgeted(upstream: Callable[..., Any]) -> Callable[..., Any]:
    """A reference keyword that spends one step of the current validation's budget."""

    def keyword(validator: Any, ref: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        left = _steps_left.get()
        if left is not None:
            left[0] -= 1
            if left[0] < 0:
                raise _TooCostly
        yield from upstream(validator, ref, instance, schema) or ()

    return keyword


def _refuse_retrieval(uri: str) -> referencing.Resource:
    """The registry's retrieve: nothing outside the schema itself, ever."""
    raise referencing.exceptions.NoSuchResource(ref=uri)


_REGISTRY: referencing.Registry = referencing.Registry(retrieve=_refuse_retrieval)


@functools.cache
def _safe_class(base: type) -> type:
    """``base`` (a draft's validator class) with RE2 patterns and budgeted refs."""
    overrides: dict[str, Callable[..., Any]] = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties(base.VALIDATORS["additionalProperties"]),
    }
    for keyword in _REF_KEYWORDS:
        if keyword in base.VALIDATORS:
            overrides[keyword] = _budgeted(base.VALIDATORS[keyword])
    return validators.extend(base, overrides)


@functools.cache
def _schema_format_checker(base: type) -> FormatChecker:
    """The formats ``check_schema`` asserts today for this draft, with ``regex``
    judged by RE2 (the patterns must compile where they will run)."""
    checker = FormatChecker(formats=())
    checker.checkers = dict(base.FORMAT_CHECKER.checkers)
    checker.checkers["regex"] = (_is_regex, _Refused)
    return checker


# --- the checks, run once per distinct schema -------------------------------------


def _reachable(
    root: referencing.Resource, resolver: Any, specification: Any
) -> Iterator[dict[str, Any]]:
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
        yield contents
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


@dataclass(frozen=True)
class _Built:
    validator: Any = None
    refusal: str | None = None


def _build(schema: Any) -> _Built:
    try:
        return _Built(validator=_validator(schema))
    except _Refused as refused:
        return _Built(refusal=refused.reason)


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
            _errors(validator, probe)
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
    for contents in _reachable(root, resolver, specification):
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


@functools.lru_cache(maxsize=VALIDATOR_CACHE_SIZE)
def _built(canonical: str, max_depth: int) -> _Built:
    # max_depth is part of the key so that a changed setting is honoured.
    return _build(json.loads(canonical))


def _compiled(schema: Any) -> Any:
    """The safe validator of a schema, or 400 VALIDATION_ERROR."""
    if not isinstance(schema, dict | bool):
        raise ApiError(400, "VALIDATION_ERROR", "value_schema must be a JSON Schema object.")
    try:
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        raise ApiError(400, "VALIDATION_ERROR", "value_schema is not JSON.") from None
    max_bytes = settings.ZEROLOCK_SCHEMA_MAX_BYTES
    if len(canonical) > max_bytes:
        raise ApiError(
            400,
            "VALIDATION_ERROR",
            f"value_schema is {len(canonical)} bytes as compact JSON; at most {max_bytes} "
            "are accepted (ZEROLOCK_SCHEMA_MAX_BYTES).",
        )
    built = _built(canonical, settings.ZEROLOCK_SCHEMA_MAX_DEPTH)
    if built.refusal is not None:
        raise ApiError(400, "VALIDATION_ERROR", f"value_schema is refused: {built.refusal}")
    return built.validator


def _errors(validator: Any, value: Any) -> ValidationError | None:
    token = _steps_left.set([REF_STEP_BUDGET])
    try:
        return best_match(validator.iter_errors(value))
    finally:
        _steps_left.reset(token)


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
    except (_TooCostly, RecursionError):
        raise ApiError(
            400,
            "SCHEMA_VIOLATION",
            "Value could not be validated against the shard's value_schema: it nests too "
            f"deep or needs more than {REF_STEP_BUDGET} reference steps.",
            path=[],
            validator="$ref",
        ) from None
    except (_Refused, referencing.exceptions.Unresolvable) as exc:
        # Only a stored schema the create-time checks never saw can get here.
        reason = exc.reason if isinstance(exc, _Refused) else "a reference does not resolve."
        raise ApiError(
            400, "VALIDATION_ERROR", f"The shard's value_schema is refused: {reason}"
        ) from None
    if error is not None:
        raise ApiError(
            400,
            "SCHEMA_VIOLATION",
            f"Value does not match the shard's value_schema: {error.message}",
            path=list(error.absolute_path),
            validator=error.validator,
        )
