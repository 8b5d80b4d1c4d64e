"""What a request may carry: the one home of the input rules every API path shares.

- JSON bodies are parsed by ``SafeJSONParser`` (DRF's parser for every /api/
  view): nesting deeper than ``ZEROLOCK_MAX_JSON_DEPTH``, integers outside the
  64-bit signed range, numbers too large for a float (``1e400``), lone UTF-16 surrogates (``"\\ud800"``)
  and NUL characters (PostgreSQL's jsonb refuses them) are refused with
  400 before any view, serializer or database sees them. Each of these answered
  500 before: a RecursionError in ``json.loads``/the renderer, an overflow in the
  database driver, and a UnicodeEncodeError on write.
- The string and number rules (``string_check``, ``utf8_string_check``,
  ``finite_check``) and the depth rule hold for what a Yjs update carries too
  (shards/crdt_update.py): one rule for both ways into a shard.
- Integer fields of request serializers are ``Int64Field`` (same range, also for
  query parameters and numbers sent as strings).
- ``revision_param`` parses a non-negative revision from a query string or a
  header: ``str.isdigit`` accepts "²", which ``int()`` then refuses.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from common.errors import ApiError

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
                    raise ApiError(
                        400,
                        "VALIDATION_ERROR",
                        f"JSON is nested too deep: at most {max_depth} levels.",
                        max_depth=max_depth,
                    )
        elif byte in closes:
            depth -= 1
    return deepest


def _int64(text: str) -> int:
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ApiError(
            400,
            "VALIDATION_ERROR",
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
        raise ApiError(
            400, "VALIDATION_ERROR", "Strings may not contain the NUL character (\\u0000)."
        )
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
    return ApiError(
        400,
        "VALIDATION_ERROR",
        "Strings must be valid Unicode: a lone surrogate (like \\ud800) is refused.",
    )


def finite_check(number: float, shown: str) -> None:
    """Refuses NaN and the infinities (``shown`` is how the input wrote it): JSON
    has no spelling for them (``1e400`` parses as one), no JSON encoder or
    PostgreSQL's jsonb can write them back, and the API would answer null."""
    if not math.isfinite(number):
        raise ApiError(
            400, "VALIDATION_ERROR", f"Number out of range: {shown[:40]} (numbers are finite)."
        )


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


class Int64Field(serializers.IntegerField):
    """An integer the database can store: 64-bit signed unless narrowed."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_value", INT64_MAX)
        kwargs.setdefault("min_value", INT64_MIN)
        super().__init__(**kwargs)


def revision_param(raw: str, name: str) -> int:
    """A revision sent as text (query string, Last-Event-ID): ASCII digits that
    fit in 64 bits."""
    if not _ASCII_DIGITS.fullmatch(raw) or int(raw) > INT64_MAX:
        raise ApiError(
            400,
            "VALIDATION_ERROR",
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
        raise ApiError(400, "VALIDATION_ERROR", "Expected a JSON object.")
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
