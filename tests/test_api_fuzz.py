"""schemathesis against the live server's own OpenAPI document (/api/schema).

Every generated request, valid or not, must get an answer the document describes:
never a 5xx, a status code the operation lists, a body that matches the listed
schema, and the listed content type. Bounded so the whole run stays near three
minutes on a 2-core machine (FUZZ_MAX_EXAMPLES examples per operation and phase).

Run it alone:
    PYTHONPATH=$PWD .venv/bin/python -m pytest -m fuzz tests/test_api_fuzz.py
"""

from __future__ import annotations

import contextlib
import os
import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from shards.services import Actor, api_key_create, shard_create

pytestmark = [pytest.mark.fuzz, pytest.mark.live, pytest.mark.django_db(transaction=True)]

# 19 operations x 2 modes x MAX_EXAMPLES cases: 40 took 23 s here, 150 about 90 s;
# the budget stops a slow machine from running on (what it skipped is a failure).
MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "150"))
TIME_BUDGET_SECONDS = float(os.environ.get("FUZZ_TIME_BUDGET", "180"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    response_schema_conformance,
    content_type_conformance,
]


@pytest.fixture
def fuzz_key(live_server_url: str) -> str:
    """An admin key (it may do everything, so the fuzzer reaches every code path),
    and a few shards for it to find: decision, additive, irreversible."""
    _, raw = api_key_create(name="fuzzer", permissions=["admin"])
    shard_create(actor=Actor("seed"), shard_id="seed-plan", shard_type="decision", initial_value={})
    shard_create(
        actor=Actor("seed"),
        shard_id="seed-notes",
        shard_type="additive",
        crdt_type="array",
        initial_value=[],
    )
    shard_create(
        actor=Actor("seed"),
        shard_id="seed-vault",
        shard_type="decision",
        initial_value={"paid": False},
        reversible=False,
    )
    return raw


def test_every_generated_request_gets_a_documented_answer_and_never_a_5xx(
    live_server_url: str, fuzz_key: str
) -> None:
    """Each operation, valid then invalid input (schemathesis' positive and negative
    modes). Failures are collected, one line per distinct (operation, check, status),
    so one run lists all of them instead of stopping at the first."""
    schema = schemathesis.openapi.from_url(
        f"{live_server_url}/api/schema?format=json", headers={"X-API-Key": fuzz_key}
    )
    schema.config.base_url = live_server_url
    headers = {"X-API-Key": fuzz_key, "X-Agent-Id": "fuzzer"}
    found: dict[tuple[str, str, int | None], str] = {}
    cases = 0
    started = time.monotonic()
    untested: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if time.monotonic() - started > TIME_BUDGET_SECONDS:
                untested.append(f"{operation.label} ({mode.value})")
                continue

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=MAX_EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def probe(case: schemathesis.Case) -> None:
                nonlocal cases
                cases += 1
                # The key and agent always: a generated X-API-Key only meets the 401.
                case.headers = {**(case.headers or {}), **headers}
                response = case.call(timeout=30)
                try:
                    case.validate_response(response, checks=CHECKS, headers=headers)
                except FailureGroup as group:
                    for failure in group.exceptions:
                        _record(found, case, response.status_code, failure)
                except Failure as failure:
                    _record(found, case, response.status_code, failure)

            # Unsatisfiable: nothing to make invalid (GET /api/health has no input).
            with contextlib.suppress(Unsatisfiable):
                probe()
    report = "\n".join(f"{k[0]} | {k[1]} | {k[2]}: {v}" for k, v in sorted(found.items(), key=str))
    print(f"\n{cases} cases in {time.monotonic() - started:.0f} s, {len(found)} distinct failures")
    print(report)
    assert not untested, f"time budget spent before: {untested}"
    assert not found, f"{len(found)} distinct failures:\n{report}"


def _record(found: dict, case: schemathesis.Case, status: int, failure: Failure) -> None:
    """The first example of each distinct (operation, check, status)."""
    key = (case.operation.label, failure.title, status)
    if key not in found:
        body = repr(case.body)[:160] if case.body is not NOT_SET else "-"
        detail = " ".join(failure.message.split())[:240]
        found[key] = f"{detail} :: query={case.query} path={case.path_parameters} body={body}"
