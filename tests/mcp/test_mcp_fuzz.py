"""Tool arguments fuzzed over MCP, on the live server.

Each tool's ``input_schema`` comes from ``tools/list``; hypothesis draws
arguments from it (schemathesis' own JSON Schema engine, the one behind the
REST fuzz suite: ``hypothesis_jsonschema`` is not installed), from it with the
ids replaced by ones that exist (so calls get past SHARD_NOT_FOUND into the
services), and as arbitrary JSON objects. Every call goes through one MCP
session (the official client) held open on an event loop in a thread (an anyio
portal). Each answer must be a tool result, never an MCP protocol error for a
known tool; never a ``_meta["zerolock/status"]`` of 500 or more; never an
INTERNAL_ERROR envelope; a refusal is ``is_error`` with the API's envelope and
a success has ``structured_content`` equal to its text block's JSON.

Bounded by time (MCP_FUZZ_MAX_TIME, default 45 s, shared among the tools) and
examples (MCP_FUZZ_MAX_EXAMPLES a tool, default 150). Failures are collected,
one line per distinct (tool, what, status), so one run lists all of them.

Run it alone (the ``fuzz`` marker):
    PYTHONPATH=$PWD .venv/bin/python -m pytest -m fuzz tests/mcp/test_mcp_fuzz.py -s
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import jsonschema_rs
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError
from schemathesis.generation.jsonschema.builder import build

from access.identity import Actor
from access.services import api_key_create
from shards.services import shard_create
from tests.mcp.helpers import mcp_session
from zerolock_mcp.tools import BY_NAME

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

MAX_TIME_SECONDS = float(os.environ.get("MCP_FUZZ_MAX_TIME", "45"))
MIN_SHARE_SECONDS = 3.0
MAX_EXAMPLES = int(os.environ.get("MCP_FUZZ_MAX_EXAMPLES", "150"))
CALL_TIMEOUT_SECONDS = 20.0
SEED_SHARDS = ["seed-plan", "seed-notes", "seed-vault", "seed-queue"]
DEFS = "#/$defs/"
# Seeded arguments added where the schema names them but the draw left them out
# (a commit's expected_version is optional to the schema, needed by the API).
FILLED = {"shard_id", "expected_version"}

JSON = st.recursive(
    st.none()
    | st.booleans()
    # Past int64 both ways, to reach whatever stores or compares a number.
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def refs_of(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs_of(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs_of(item)


@pytest.fixture
def fuzz_key(live_server_url: str) -> str:
    """An admin key (it may do everything, so the fuzzer reaches every code path),
    and shards to find: decision, additive, irreversible, a task queue."""
    _, raw = api_key_create(name="fuzzer", permissions=["admin"])
    seed = Actor("seed")
    shard_create(actor=seed, shard_id="seed-plan", shard_type="decision", initial_value={})
    shard_create(
        actor=seed,
        shard_id="seed-notes",
        shard_type="additive",
        crdt_type="array",
        initial_value=[],
    )
    shard_create(
        actor=seed,
        shard_id="seed-vault",
        shard_type="decision",
        initial_value={"paid": False},
        reversible=False,
    )
    queue = {f"t{n}": {"status": "pending"} for n in range(20)}
    shard_create(actor=seed, shard_id="seed-queue", shard_type="decision", initial_value=queue)
    return raw


@pytest.fixture
def session(live_server_url: str, fuzz_key: str) -> Iterator[tuple[BlockingPortal, Any]]:
    """One MCP session for the whole test, on an event loop in its own thread."""
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(
            mcp_session(live_server_url, fuzz_key, "fuzzer")
        ) as client,
    ):
        yield portal, client


def call(portal: BlockingPortal, client: Any, tool: str, arguments: dict[str, Any]) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(CALL_TIMEOUT_SECONDS):
            return await client.call_tool(tool, arguments)

    return portal.call(bounded)


def list_tools(portal: BlockingPortal, client: Any) -> dict[str, dict[str, Any]]:
    tools = portal.call(client.list_tools).tools
    return {tool.name: tool.input_schema for tool in tools}


def test_every_tools_input_schema_is_a_2020_12_schema_whose_refs_resolve(
    session: tuple[BlockingPortal, Any],
) -> None:
    """A client compiles these before it calls (and the fuzzer below does): a
    $ref into $defs that the schema does not carry makes the whole tool unusable.
    They did not carry them (zerolock_mcp/schemas.py, found by this test)."""
    schemas = list_tools(*session)
    assert set(schemas) == set(BY_NAME)  # every tool, listed once
    for name, schema in schemas.items():
        defs = schema.get("$defs", {})
        for ref in refs_of(schema):
            assert ref.startswith(DEFS) and ref[len(DEFS) :] in defs, (name, ref, sorted(defs))
        validator = jsonschema_rs.Draft202012Validator(schema)
        assert not validator.is_valid([]), name  # arguments are an object, always


def arguments_for(schema: dict[str, Any], seeds: dict[str, list[str]]) -> st.SearchStrategy:
    shaped = build(schema, draft=jsonschema_rs.Draft202012, formats={})

    names = sorted(schema.get("properties", {}))

    def seeded(pair: tuple[dict[str, Any], int]) -> dict[str, Any]:
        """Real ids, and only the named arguments (extra ones, which the schema
        allows where the body ignores them, are what most REST bodies refuse)."""
        arguments, pick = pair
        if not isinstance(arguments, dict):
            return arguments
        return {name: value for name, value in arguments.items() if name in names} | {
            name: ids[pick % len(ids)]
            for name, ids in seeds.items()
            if name in arguments or (name in FILLED and name in names)
        }

    anything = st.dictionaries(
        st.sampled_from(names) | st.text(max_size=12) if names else st.text(max_size=12),
        JSON,
        max_size=6,
    )
    return st.one_of(
        shaped, st.tuples(shaped, st.integers(min_value=0, max_value=99)).map(seeded), anything
    )


def judged(tool: str, result: Any) -> list[tuple[str, str]]:
    """What is wrong with one tool result: (what, detail) pairs."""
    wrong: list[tuple[str, str]] = []
    status = (result.meta or {}).get("zerolock/status")
    if not isinstance(status, int):
        return [("no zerolock/status", repr(result.meta))]
    if status >= 500:
        wrong.append(("status >= 500", str(status)))
    if bool(result.is_error) != (status >= 400):
        wrong.append(("is_error disagrees with the status", f"{status} {result.is_error}"))
    if not result.content or result.content[0].type != "text":
        return [*wrong, ("no text block", repr(result.content)[:200])]
    try:
        text = json.loads(result.content[0].text)
    except ValueError:
        return [*wrong, ("a text block that is not JSON", result.content[0].text[:200])]
    if text != result.structured_content:
        wrong.append(("structured_content is not the text block's JSON", str(status)))
    if result.is_error:
        error = text.get("error") if isinstance(text, dict) else None
        if not isinstance(error, dict) or not {"code", "message"} <= set(error):
            wrong.append(("a refusal without the API's envelope", repr(text)[:200]))
        elif error["code"] == "INTERNAL_ERROR":
            wrong.append(("INTERNAL_ERROR", str(status)))
    return wrong


def fuzz_one(
    portal: BlockingPortal,
    client: Any,
    tool: str,
    strategy: st.SearchStrategy,
    deadline: float,
    found: dict[tuple[str, str, str], str],
    statuses: Counter[str],
) -> None:
    """Hypothesis' examples for one tool, until its examples or its deadline run out."""

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(arguments=strategy)
    def examples(arguments: dict[str, Any]) -> None:
        if time.monotonic() > deadline:
            return  # the budget is spent: the rest of the examples are skipped
        wait = arguments.get("wait_seconds") if tool == "approval_get" else None
        if isinstance(wait, int) and 1 < wait <= 50:
            # A real wait on the seeded pending approval would spend the budget
            # sleeping; out-of-range values are kept (refused at once).
            arguments = arguments | {"wait_seconds": 1}
        sample = json.dumps(arguments)[:600]
        try:
            result = call(portal, client, tool, arguments)
        except MCPError as error:
            found.setdefault(
                (tool, "an MCP protocol error", f"{error.code} {error.message}"[:200]), sample
            )
            statuses["protocol error"] += 1
            return
        except TimeoutError:
            found.setdefault((tool, "no answer within the timeout", ""), sample)
            statuses["timeout"] += 1
            return
        status = (result.meta or {}).get("zerolock/status")
        content = result.structured_content
        error = content.get("error") if result.is_error and isinstance(content, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        statuses[f"{status} {code or ''}".strip()] += 1
        for what, detail in judged(tool, result):
            found.setdefault((tool, what, detail), sample)

    examples()


@pytest.mark.fuzz
def test_generated_tool_arguments_always_get_a_tool_result_and_never_a_server_error(
    session: tuple[BlockingPortal, Any],
) -> None:
    portal, client = session
    schemas = list_tools(portal, client)
    lease = call(portal, client, "lease_grant", {"ttl_seconds": 3600})
    approval = call(
        portal,
        client,
        "approval_request",
        {
            "shard_id": "seed-vault",
            "proposed_value": {"paid": True},
            "expected_version": 1,
            "description": "pay",
        },
    )
    assert not lease.is_error and not approval.is_error, (lease, approval)
    seeds = {
        "shard_id": SEED_SHARDS,
        "lease_id": [lease.structured_content["lease_id"]],
        "approval_id": [approval.structured_content["id"]],
        # Versions the seeded shards pass through, so some commits land.
        "expected_version": [1, 2, 3, 4],
    }

    found: dict[tuple[str, str, str], str] = {}
    statuses: dict[str, Counter[str]] = {name: Counter() for name in schemas}
    started = time.monotonic()
    for index, (tool, schema) in enumerate(sorted(schemas.items())):
        # Each tool's share of the budget; what one leaves unused goes to the next.
        # One that overran (approval_get may wait up to 50 s for a decision) must
        # not leave the tools after it no time at all: each gets a few seconds.
        deadline = max(
            started + MAX_TIME_SECONDS * (index + 1) / len(schemas),
            time.monotonic() + MIN_SHARE_SECONDS,
        )
        fuzz_one(
            portal, client, tool, arguments_for(schema, seeds), deadline, found, statuses[tool]
        )

    took = time.monotonic() - started
    calls = sum(sum(counts.values()) for counts in statuses.values())
    report = "\n".join(
        f"{tool} | {what} | {detail}\n    {sample}"
        for (tool, what, detail), sample in sorted(found.items())
    )
    print(f"\n{calls} tool calls in {took:.1f} s, {len(found)} distinct failures\n{report}")
    for tool, counts in sorted(statuses.items()):
        print(f"  {tool}: {dict(counts.most_common())}")
    assert all(statuses[tool] for tool in schemas), "a tool got no call: a vacuous pass"
    assert sum(n for c in statuses.values() for s, n in c.items() if s.startswith("2")) > 0
    assert calls >= 100, "the fuzzer hardly ran: a vacuous pass"
    assert not found, f"{len(found)} distinct failures:\n{report}"
