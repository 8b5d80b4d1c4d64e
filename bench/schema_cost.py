"""What value_schema validation costs: steps spent, time, and the answer, for
ordinary values and for the shapes a probe used to burn the CPU.

Run by hand (not a test):

    .venv/bin/python bench/schema_cost.py

No database and no server: ``shards.value_schema`` (and its keywords) alone, in one thread, with
the CPU budget of ``ZEROLOCK_SCHEMA_BUDGET_MS`` (steps are counted for the table). Each case is timed best of three; "plain"
is the same schema and value through jsonschema's own validator without the
budget, RE2 or linear-time equality (skipped where it would take minutes).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def records(n: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "name": f"record number {i}", "tags": ["alpha", "beta"], "ok": i % 2 == 0}
        for i in range(n)
    ]


RECORD_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 0},
            "name": {"type": "string", "maxLength": 100},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
            "ok": {"type": "boolean"},
        },
        "required": ["id", "name"],
        "additionalProperties": False,
    },
}


def cases() -> list[tuple[str, Any, Any, bool]]:
    """(name, schema, value, run plain jsonschema too)."""
    branches = [{"type": "object", "required": [f"k{i}"]} for i in range(500)]
    return [
        ("1 MB of records (8,000 objects)", RECORD_SCHEMA, records(8_000), True),
        ("100 KB of records (800 objects)", RECORD_SCHEMA, records(800), True),
        (
            "uniqueItems, 77 KB of objects (the probe's)",
            {"type": "array", "uniqueItems": True},
            [{"n": i, "pad": "x" * 8} for i in range(3_000)],
            False,
        ),
        (
            "uniqueItems, 1 MB of objects",
            {"type": "array", "uniqueItems": True},
            records(8_000),
            False,
        ),
        (
            "enum of 5,000 over 50,000 strings",
            {"type": "array", "items": {"enum": [f"v{i}" for i in range(5_000)]}},
            [f"v{i % 5_000}" for i in range(50_000)],
            False,
        ),
        (
            "anyOf of 500 objects over a 2 KB array",
            {"type": "array", "items": {"anyOf": branches}},
            [{"z": 1}] * 300,
            False,
        ),
        (
            "a 20,000-node tree",
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#"}},
                },
            },
            {"name": "root", "children": [{"name": "leaf", "children": []}] * 20_000},
            True,
        ),
    ]


def best_of(rounds: int, work: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(rounds):
        started = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    sys.path[0] = str(ROOT)
    os.environ["DJANGO_SETTINGS_MODULE"] = "zerolock_site.settings"
    os.environ.setdefault("ZEROLOCK_DATA_DIR", "/tmp/zerolock-schema-cost")
    import django

    django.setup()
    from django.conf import settings
    from jsonschema import Draft202012Validator

    from common.errors import ApiError
    from shards import schema_keywords, value_schema

    def metered(schema: Any, value: Any) -> tuple[str, int]:
        try:
            value_schema.schema_check(schema)
        except ApiError as refused:
            return f"create: {refused.code}", 0
        steps = 0
        spend = schema_keywords._spend

        def counted(n: int) -> None:
            nonlocal steps
            steps += n
            spend(n)

        schema_keywords._spend = counted
        try:
            value_schema.value_validate(schema, value)
            outcome = "ok"
        except ApiError as refused:
            outcome = refused.code
        finally:
            schema_keywords._spend = spend
        return outcome, steps

    print(f"CPU budget {settings.ZEROLOCK_SCHEMA_BUDGET_MS} ms\n")
    print("| case | value KB | answer | steps | ms | plain jsonschema ms |")
    print("|---|---|---|---|---|---|")
    for name, schema, value, plain in cases():
        size = len(json.dumps(value)) / 1024
        seconds, (outcome, steps) = best_of(3, lambda s=schema, v=value: metered(s, v))
        plain_ms = "-"
        if plain:
            check = Draft202012Validator(schema)
            plain_s, _ = best_of(3, lambda c=check, v=value: c.is_valid(v))
            plain_ms = f"{plain_s * 1000:.0f}"
        print(
            f"| {name} | {size:.0f} | {outcome} | {steps:,} | {seconds * 1000:.0f} | {plain_ms} |"
        )


if __name__ == "__main__":
    main()
