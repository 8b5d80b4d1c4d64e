"""The error catalogue (common.errors.ErrorCode) and the contract's table of codes
(docs/api.md, "Every error code") are one list, and call sites name codes only
through the catalogue."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from common.errors import (
    ApiError,
    ErrorCode,
    KeyExpired,
    KeyRevoked,
    LeaseNotFound,
    OutOfScope,
    PermissionDenied,
    RateLimited,
    StaleVersion,
    Unauthenticated,
)

ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = (
    "access",
    "approvals",
    "audit",
    "common",
    "coordination",
    "dashboard",
    "metrics",
    "realtime",
    "shards",
    "supervision",
    "zerolock_site",
)
# The table's status for ERROR: it keeps the status of the refusal it stands for.
OTHER_4XX = "other 4xx"


def documented_codes() -> dict[str, str]:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("\n## Every error code\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \| ([^|]+?) \|", section, re.M)
    assert rows, "the table under '## Every error code' was not found"
    return dict(rows)


def status_of(code: ErrorCode) -> str:
    try:
        return str(code.status)
    except ValueError:
        return OTHER_4XX


def test_every_code_in_the_catalogue_is_in_the_table_with_its_status() -> None:
    table = documented_codes()
    assert {code.value: status_of(code) for code in ErrorCode} == {
        code: table.get(code) for code in ErrorCode
    }


def test_every_code_in_the_table_is_in_the_catalogue() -> None:
    assert sorted(set(documented_codes()) - {code.value for code in ErrorCode}) == []


def test_only_error_has_no_status_of_its_own() -> None:
    assert [code for code in ErrorCode if status_of(code) == OTHER_4XX] == [ErrorCode.ERROR]
    with pytest.raises(ValueError):
        ApiError(ErrorCode.ERROR, "No status to send.")


def test_a_code_is_its_name_on_the_wire() -> None:
    assert ErrorCode.STALE_VERSION == "STALE_VERSION"
    assert ApiError(ErrorCode.STALE_VERSION, "m").envelope() == {
        "error": {"code": "STALE_VERSION", "message": "m"}
    }


def code_argument(node: ast.Call) -> ast.expr | None:
    """The code an ApiError construction, a ``super().__init__`` in an error
    class or an ``envelope(...)`` call is given: its first argument, or ``code=``."""
    keyword = next((k.value for k in node.keywords if k.arg == "code"), None)
    return node.args[0] if node.args else keyword


def literal_codes() -> list[str]:
    found = []
    for package in SERVER_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                in_error_class = name == "__init__" and "super()" in ast.unparse(func)
                if name not in {"ApiError", "envelope"} and not in_error_class:
                    continue
                code = code_argument(node)
                if not isinstance(code, ast.Constant):
                    continue
                # A subclass may hand its parent another literal (OutOfScope: a permission).
                named = code.value in set(ErrorCode) or not in_error_class
                if isinstance(code.value, int) or (isinstance(code.value, str) and named):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_error_in_the_server_names_its_code_or_status_as_a_literal() -> None:
    assert literal_codes() == []


def test_the_literal_check_sees_a_literal_code() -> None:
    tree = ast.parse('ApiError(400, "VALIDATION_ERROR", "m")\nenvelope("BAD_REQUEST", "m")')
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    assert [ast.unparse(code_argument(call) or call) for call in calls] == [
        "400",
        "'BAD_REQUEST'",
    ]


@pytest.mark.parametrize(
    ("error", "status", "wire"),
    [
        (
            Unauthenticated(),
            401,
            {"code": "UNAUTHENTICATED", "message": "Send your API key in the X-API-Key header."},
        ),
        (
            Unauthenticated(unknown_key=True),
            401,
            {"code": "UNAUTHENTICATED", "message": "Unknown API key."},
        ),
        (KeyRevoked(), 401, {"code": "KEY_REVOKED", "message": "This API key has been revoked."}),
        (
            KeyRevoked(or_expired=True),
            401,
            {"code": "KEY_REVOKED", "message": "This API key has been revoked or has expired."},
        ),
        (KeyExpired(), 401, {"code": "KEY_EXPIRED", "message": "This API key has expired."}),
        (
            PermissionDenied("shard:write"),
            403,
            {
                "code": "PERMISSION_DENIED",
                "message": "This key lacks the 'shard:write' permission.",
                "permission": "shard:write",
            },
        ),
        (
            OutOfScope(["b1"], ["a"]),
            403,
            {
                "code": "PERMISSION_DENIED",
                "message": "This key may not touch 'b1' (scopes: ['a']).",
                "permission": "shard scope",
                "shard_ids": ["b1"],
            },
        ),
        (
            StaleVersion(2, 3),
            409,
            {
                "code": "STALE_VERSION",
                "message": "Version 2 is not current (current is 3).",
                "expected_version": 2,
                "current_version": 3,
            },
        ),
        (
            LeaseNotFound("l1"),
            404,
            {"code": "LEASE_NOT_FOUND", "message": "No live lease 'l1'.", "lease_id": "l1"},
        ),
        (
            RateLimited(limit=5, who="key zl_ab", retry_after=7),
            429,
            {
                "code": "RATE_LIMITED",
                "message": "Rate limit of 5 requests per minute exceeded for key zl_ab; "
                "retry in 7 s.",
                "retry_after": 7,
            },
        ),
    ],
)
def test_a_repeated_refusal_keeps_its_one_message(
    error: ApiError, status: int, wire: dict[str, object]
) -> None:
    assert (error.status, error.envelope()) == (status, {"error": wire})
