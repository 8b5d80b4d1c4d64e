"""What a request may carry: the one home of the input rules every API path shares.

- JSON bodies are parsed by ``SafeJSONParser`` (DRF's parser for every /api/
  view): nesting deeper than ``ZEROLOCK_MAX_JSON_DEPTH``, integers outside the
  64-bit signed range, numbers too large for a float (``1e400``), lone UTF-16 surrogates (``"\\ud800"``)
  and NUL characters (PostgreSQL's jsonb refuses them) are refused with
  400 before any view, serializer or database sees them. Each of these answered
  500 before: a RecursionError in ``json.loads``/the renderer, an overflow in the
  database driver, and a UnicodeEncodeError on write.
- Every field of a request body takes its own JSON type and nothing else
  (``JsonTyped``: ``Int64Field``, ``StringField``, ``BooleanField``,
  ``ChoiceField``, and the id fields of ``common.ids``): DRF's own fields coerce, so
  ``{"id": 0}`` became shard ``"0"``, ``"60"`` and ``1000.0`` were a
  ``ttl_seconds`` and ``"false"`` a boolean. Strings are taken as sent (not
  trimmed). Hand-parsed bodies (transactions, leases, additive operations) ask
  ``is_json_integer``. Query parameters are text: their integers are
  ``QueryInt64Field`` (ASCII digits), the same 64-bit range.
- The string and number rules (``string_check``, ``utf8_string_check``,
  ``finite_check``) and the depth rule hold for what a Yjs update carries too
  (shards/crdt_update.py): one rule for both ways into a shard.
- ``revision_param`` parses a non-negative revision from a query string or a
  header: ``str.isdigit`` accepts "²", which ``int()`` then refuses.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeGuard

from django.conf import settings
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from common.errors import ApiError, Invalid

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_ASCII_DIGITS = re.compile(r"[0-9]{1,19}")


def json_depth_check(raw: bytes, max_depth: int) -> int:
    """Refuses JSON nested deeper than ``max_depth``, in one pass over the bytes;
    returns how deep it nests (0 for a scalar).

    Runs before ``json.loads``, which recurses once per level and fails near
    1,000 levels. Brackets inside strings do not count; escapes inside strings
    are skipped so ``"\\""`` does not end a string early."""
    depth = deepest = 0
    in_string = False
    escaped = False
    # Iterating bytes yields ints; the hot loop stays on ints.
    quote, backslash, opens, closes = 0x22, 0x5C, (0x5B, 0x7B), (0x5D, 0x7D)
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == backslash:
                escaped = True
            elif byte == quote:
                in_string = False
        elif byte == quote:
            in_string = True
        elif byte in opens:
            depth += 1
            if depth > deepest:
                deepest = depth
                if depth > max_depth:
                    raise Invalid(
                        f"JSON is nested too deep: at most {max_depth} levels.",
                        max_depth=max_depth,
                    )
        elif byte in closes:
            depth -= 1
    return deepest


def _int64(text: str) -> int:
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise Invalid(
            f"Integer out of range: JSON integers must fit in 64 bits "
            f"({INT64_MIN} to {INT64_MAX}).",
        )
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    finite_check(value, text)
    return value


def _no_constants(name: str) -> Any:
    raise ParseError(f"{name} is not valid JSON.")


def string_check(text: str) -> None:
    """Refuses a string (a value or a key) holding a lone surrogate: it cannot be
    encoded as UTF-8, so storing or echoing it fails; or a NUL character, which
    PostgreSQL's jsonb cannot store (one rule on both backends, so a value valid
    on SQLite is valid on PostgreSQL). REST bodies and Yjs updates alike."""
    if "\x00" in text:
        raise Invalid("Strings may not contain the NUL character (\\u0000).")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _not_unicode() from None


def utf8_string_check(raw: bytes) -> str:
    """The string that ``raw`` encodes, under ``string_check``: bytes that are not
    UTF-8 (an encoded surrogate, ``\\xed\\xa0\\x80``, included) are refused as a
    lone surrogate is."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _not_unicode() from None
    string_check(text)
    return text


def _not_unicode() -> ApiError:
    return Invalid(
        "Strings must be valid Unicode: a lone surrogate (like \\ud800) is refused.",
    )


def finite_check(number: float, shown: str) -> None:
    """Refuses NaN and the infinities (``shown`` is how the input wrote it): JSON
    has no spelling for them (``1e400`` parses as one), no JSON encoder or
    PostgreSQL's jsonb can write them back, and the API would answer null."""
    if not math.isfinite(number):
        raise Invalid(f"Number out of range: {shown[:40]} (numbers are finite).")


def _strings_check(data: Any) -> None:
    """``string_check`` on every string of a parsed body, keys included.
    Iterative: no recursion."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            string_check(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


# What json_body_loads raises for bytes that are not JSON (DRF's ParseError, a
# 400 MALFORMED_JSON on a request), by a name of this module: callers outside
# the HTTP layer (Yjs updates) catch it without importing DRF.
NotJson = ParseError


def json_body_loads(raw: bytes | str) -> Any:
    """Parses a JSON request body under the rules above (400 ApiError or
    ParseError for anything else that is not JSON)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    json_depth_check(raw, settings.ZEROLOCK_MAX_JSON_DEPTH)
    try:
        text = raw.decode("utf-8")
        data = json.loads(
            text, parse_int=_int64, parse_float=_finite_float, parse_constant=_no_constants
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParseError(str(exc)) from None
    _strings_check(data)
    return data


class SafeJSONParser(JSONParser):
    """DRF's JSON parser with the depth, integer and surrogate rules."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return json_body_loads(stream.read() if stream is not None else b"")


def is_json_integer(value: object) -> TypeGuard[int]:
    """A JSON integer as parsed: an int, and not a bool (``True == 1`` in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "integer": is_json_integer,
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
}


class JsonTyped:
    """Mixed into a DRF field of a request body: only a value of the field's own
    JSON type gets to the field (which would coerce anything else), and strings
    are not trimmed. ``null`` is still the field's ``allow_null`` to decide."""

    json_type: ClassVar[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if isinstance(self, serializers.CharField):
            kwargs.setdefault("trim_whitespace", False)
        super().__init__(*args, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not _JSON_TYPES[self.json_type](data):
            raise serializers.ValidationError(f"Must be a JSON {self.json_type}.", code="type")
        return super().to_internal_value(data)  # type: ignore[misc]


class Int64Field(JsonTyped, serializers.IntegerField):
    """A JSON integer the database can store: 64-bit signed unless narrowed."""

    json_type = "integer"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_value", INT64_MAX)
        kwargs.setdefault("min_value", INT64_MIN)
        super().__init__(**kwargs)


class StringField(JsonTyped, serializers.CharField):
    json_type = "string"


class BooleanField(JsonTyped, serializers.BooleanField):
    json_type = "boolean"


class ChoiceField(JsonTyped, serializers.ChoiceField):
    """One of string choices (DRF's compares ``str(value)``: 0 would match "0")."""

    json_type = "string"


class StrictSerializer(serializers.Serializer):
    """Unknown fields are refused (400 VALIDATION_ERROR), not ignored."""

    # A caller who sends ``reason`` or ``metadata`` to a server that would drop
    # it must find out. The OpenAPI schema says ``additionalProperties: false``
    # (common.openapi.ClosedBodySchema).

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class QueryDateTimeField(serializers.DateTimeField):
    """An instant in a query parameter (ISO 8601). One that leaves the years
    1-9999 only once moved to UTC (``0001-01-01T01:00+03:00``) is valid RFC 3339
    but not a Python datetime: it is taken as the first or the last instant there
    is, so "since then" means everything or nothing, not a 400."""

    def enforce_timezone(self, value: datetime) -> datetime:
        try:
            return super().enforce_timezone(value)
        except serializers.ValidationError:
            if value.utcoffset() is None:
                raise
            edge = datetime.min if value.year == 1 else datetime.max
            return edge.replace(tzinfo=UTC)


_QUERY_INT = re.compile(r"-?[0-9]{1,19}")


class QueryInt64Field(serializers.IntegerField):
    """An integer written as text, in a query parameter: ASCII digits (DRF's own
    field also reads "5.0", " 5" and "+5"), in the 64-bit range."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_value", INT64_MAX)
        kwargs.setdefault("min_value", INT64_MIN)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if not isinstance(data, str) or not _QUERY_INT.fullmatch(data):
            self.fail("invalid")
        return int(data)


def revision_param(raw: str, name: str) -> int:
    """A revision sent as text (query string, Last-Event-ID): ASCII digits that
    fit in 64 bits."""
    if not _ASCII_DIGITS.fullmatch(raw) or int(raw) > INT64_MAX:
        raise Invalid(
            f"{name} must be a revision (a non-negative 64-bit integer).",
        )
    return int(raw)


_reused = threading.local()


def parsed(serializer_class: type, data: Any) -> dict[str, Any]:
    """The body validated by ``serializer_class``; a ValidationError (400) if not.

    One serializer per class and thread is reused: DRF builds a serializer by
    deep-copying every declared field, about 5 % of a commit's CPU (profiled).
    Validation keeps nothing between calls but ``initial_data``, which
    ``validate()`` may read and which is set here for each call."""
    if not isinstance(data, dict):
        raise Invalid("Expected a JSON object.")
    by_class = _reused.__dict__.setdefault("by_class", {})
    serializer = by_class.get(serializer_class)
    if serializer is None:
        serializer = by_class[serializer_class] = serializer_class()
    serializer.initial_data = data
    try:
        return serializer.run_validation(data)
    finally:
        del serializer.initial_data  # the body is not kept past its request


def iso_time(value: Any) -> str | None:
    """A datetime as the API shows it: ISO 8601, UTC as "Z"."""
    return value.isoformat().replace("+00:00", "Z") if value is not None else None
