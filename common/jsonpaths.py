"""Paths inside a JSON value: a list of object keys (strings) and array
indexes (integers). Used by transactions' put/delete/compare and by a lease's
end, which removes the paths it held."""

from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, ErrorCode

# What a path that leads nowhere finds (None is a value).
ABSENT: Any = object()
_ABSENT = ABSENT


def path_get(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        if isinstance(value, dict) and isinstance(part, str):
            value = value.get(part, _ABSENT)
        elif isinstance(value, list) and isinstance(part, int) and -len(value) <= part < len(value):
            value = value[part]
        else:
            return _ABSENT
        if value is _ABSENT:
            return _ABSENT
    return value


def path_put(value: Any, path: tuple[Any, ...], new: Any, where: str) -> Any:
    """``value`` with ``new`` at ``path``, creating intermediate objects."""
    if not path:
        return copy.deepcopy(new)
    head, rest = path[0], path[1:]
    if isinstance(value, list) and isinstance(head, int) and -len(value) <= head < len(value):
        value[head] = path_put(value[head], rest, new, where)
        return value
    if value is None or value is _ABSENT:
        value = {}
    if not isinstance(value, dict) or not isinstance(head, str):
        raise ApiError(
            ErrorCode.PATH_CONFLICT, f"{where}: the path goes through a non-object.", at=where
        )
    value[head] = path_put(value.get(head, _ABSENT), rest, new, where)
    return value


def path_delete(value: Any, path: tuple[Any, ...]) -> bool:
    """Removes what is at ``path``; False when nothing was there."""
    parent = path_get(value, path[:-1])
    last = path[-1]
    if isinstance(parent, dict) and isinstance(last, str) and last in parent:
        del parent[last]
        return True
    if isinstance(parent, list) and isinstance(last, int) and -len(parent) <= last < len(parent):
        del parent[last]
        return True
    return False


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: Python's ``==`` says ``True == 1`` (and so
    ``[true] == [1]``), but JSON's true is not the number 1. Numbers compare by
    value (1 equals 1.0: pycrdt hands integers back as floats)."""
    if _number(a) or _number(b):
        return _number(a) and _number(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def json_less(a: Any, b: Any) -> bool | None:
    """``a < b`` for two numbers or two strings; None when JSON gives them no
    order (booleans, null, arrays, objects, or two different kinds)."""
    if (_number(a) and _number(b)) or (isinstance(a, str) and isinstance(b, str)):
        return a < b
    return None
