"""/mcp on the live server, through the official MCP client over real sockets:
every tool's success, its refusals in the API's envelope, the key gate, and an
approval asked over MCP and decided by a person's key over REST."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import jsonschema
import pytest
from asgiref.sync import sync_to_async

from access.services import api_key_create
from audit.models import AuditEntry
from tests.mcp.helpers import answer_of, error_of, mcp_session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

WRITER = ["shard:read", "shard:write", "shard:create", "approval:request"]
AUDITED = ("action", "agent_id", "key_prefix", "shard_id", "version_before", "version_after")


async def key(name: str, permissions: list[str], **kwargs: Any) -> tuple[Any, str]:
    return await sync_to_async(api_key_create)(name=name, permissions=permissions, **kwargs)


def status_of(result: Any) -> int:
    return result.meta["zerolock/status"]


async def test_the_tools_are_listed_with_schemas_from_the_api_and_honest_hints(live_server_url):
    _, alice = await key("alice", WRITER)
    async with mcp_session(live_server_url, alice, "alice") as mcp:
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
    assert sorted(tools) == sorted(
        [
            "shard_read",
            "shard_create",
            "shard_commit",
            "task_claim",
            "txn",
            "lease_grant",
            "lease_keepalive",
            "lease_revoke",
            "reservation_create",
            "reservation_check",
            "reservation_release",
            "approval_request",
            "approval_get",
        ]
    )
    arguments = {name: set(tool.input_schema["properties"]) for name, tool in tools.items()}
    assert arguments["shard_create"] == {
        "id",
        "type",
        "initial_value",
        "crdt_type",
        "value_schema",
        "reversible",
        "owner_policy",
        "owners",
        "approvals_required",
    }
    assert arguments["shard_commit"] == {
        "shard_id",
        "expected_version",
        "new_value",
        "append",
        "delta",
        "read_set",
        "fence",
        "approval_id",
        "idempotency_key",
    }
    assert arguments["task_claim"] == {"shard_id", "where", "set", "lease_id", "fence"}
    assert {"compare", "success", "failure"} <= arguments["txn"]
    assert arguments["lease_grant"] == {"ttl_seconds"}
    assert arguments["lease_keepalive"] == arguments["lease_revoke"] == {"lease_id"}
    assert arguments["reservation_create"] == {
        "patterns",
        "exclusive",
        "ttl_seconds",
        "reason",
        "lease_id",
    }
    assert arguments["reservation_check"] == {"paths"}
    assert arguments["reservation_release"] == {"reservation_id"}
    assert arguments["approval_request"] == {
        "shard_id",
        "proposed_value",
        "expected_version",
        "description",
        "ttl_seconds",
        "metadata",
        "previous_id",  # ask again after changes_requested
    }
    assert arguments["approval_get"] == {"approval_id", "wait_seconds"}
    assert tools["approval_get"].input_schema["properties"]["wait_seconds"]["maximum"] == 50
    # The API's own rules, from its OpenAPI document: the shard-id pattern.
    async with httpx.AsyncClient(base_url=live_server_url) as http:
        document = (await http.get("/api/schema?format=json")).json()
    shard_id = document["paths"]["/api/shards/{shard_id}"]["get"]["parameters"][0]["schema"]
    assert tools["shard_read"].input_schema["properties"]["shard_id"] == shard_id
    # Each is a sound draft 2020-12 schema whose references resolve inside it.
    good = {
        "shard_commit": {"shard_id": "a", "expected_version": 1, "new_value": {"x": [1, None]}},
        "shard_create": {"id": "a", "type": "decision", "initial_value": {"x": "y"}},
        "approval_request": {
            "shard_id": "a",
            "proposed_value": [1],
            "expected_version": 1,
            "description": "d",
            "metadata": {"tool": {"name": "pay"}},
        },
        "txn": {"compare": [], "success": [{"op": "get", "shard_id": "a"}], "failure": []},
    }
    for name, tool in tools.items():
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        validator = jsonschema.Draft202012Validator(tool.input_schema)
        if name in good:
            assert validator.is_valid(good[name]), list(validator.iter_errors(good[name]))
    assert not jsonschema.Draft202012Validator(tools["shard_read"].input_schema).is_valid(
        {"shard_id": "../x"}
    )
    hints = {name: tool.annotations for name, tool in tools.items()}
    assert hints["shard_read"].read_only_hint and hints["approval_get"].read_only_hint
    assert hints["shard_commit"].destructive_hint and hints["task_claim"].destructive_hint
    assert hints["lease_keepalive"].idempotent_hint and not hints["task_claim"].idempotent_hint
    assert hints["shard_create"].destructive_hint is False
    assert "STALE_VERSION" in tools["shard_commit"].description
    assert "do not retry the same version" in tools["shard_commit"].description.lower()


async def test_every_tool_succeeds_with_the_rest_answer_as_its_content(live_server_url):
    _, alice = await key("alice", WRITER)
    async with mcp_session(live_server_url, alice, "alice") as mcp:
        created = answer_of(
            await mcp.call_tool(
                "shard_create", {"id": "plan", "type": "decision", "initial_value": {"step": 1}}
            )
        )
        assert (created["id"], created["version"], created["value"]) == ("plan", 1, {"step": 1})
        read = answer_of(await mcp.call_tool("shard_read", {"shard_id": "plan"}))
        assert (read["version"], read["value"], read["updated_by"]) == (1, {"step": 1}, "alice")
        committed = await mcp.call_tool(
            "shard_commit",
            {"shard_id": "plan", "expected_version": 1, "new_value": {"step": 2}},
        )
        assert not committed.is_error and status_of(committed) == 200
        assert answer_of(committed)["version"] == 2

        answer_of(
            await mcp.call_tool(
                "shard_create",
                {"id": "notes", "type": "additive", "crdt_type": "array", "initial_value": []},
            )
        )
        appended = answer_of(
            await mcp.call_tool("shard_commit", {"shard_id": "notes", "append": ["a", "b"]})
        )
        assert appended["value"] == ["a", "b"]

        queue = {"t1": {"status": "pending"}, "t2": {"status": "pending"}}
        answer_of(
            await mcp.call_tool(
                "shard_create", {"id": "queue", "type": "decision", "initial_value": queue}
            )
        )
        lease = answer_of(await mcp.call_tool("lease_grant", {"ttl_seconds": 30}))
        assert lease["lease_id"].startswith("lse_") and lease["ttl_seconds"] == 30
        claimed = answer_of(
            await mcp.call_tool(
                "task_claim",
                {
                    "shard_id": "queue",
                    "where": {"status": "pending"},
                    "set": {"status": "claimed"},
                    "lease_id": lease["lease_id"],
                },
            )
        )
        assert claimed["task"]["holder"] == "alice" and claimed["task_id"] in queue
        kept = answer_of(await mcp.call_tool("lease_keepalive", {"lease_id": lease["lease_id"]}))
        assert kept["lease_id"] == lease["lease_id"]

        txn = answer_of(
            await mcp.call_tool(
                "txn",
                {
                    "compare": [{"shard_id": "plan", "version": 2}],
                    "success": [{"op": "put", "shard_id": "plan", "value": {"step": 3}}],
                    "failure": [{"op": "get", "shard_id": "plan"}],
                },
            )
        )
        assert txn["succeeded"] is True

        revoked = answer_of(await mcp.call_tool("lease_revoke", {"lease_id": lease["lease_id"]}))
        assert revoked == {"lease_id": lease["lease_id"], "revoked": True}
        gone = await mcp.call_tool("lease_keepalive", {"lease_id": lease["lease_id"]})
        assert error_of(gone)["code"] == "LEASE_NOT_FOUND" and status_of(gone) == 404


async def test_two_agents_over_mcp_reserve_paths_and_the_second_is_refused_the_overlap(
    live_server_url,
):
    _, alice_key = await key("alice", WRITER)
    _, bob_key = await key("bob", WRITER)
    async with (
        mcp_session(live_server_url, alice_key, "alice") as alice,
        mcp_session(live_server_url, bob_key, "bob") as bob,
    ):
        held = answer_of(
            await alice.call_tool(
                "reservation_create",
                {"patterns": ["src/**/*.py"], "ttl_seconds": 600, "reason": "parser rewrite"},
            )
        )
        assert held["holder"] == "alice" and held["exclusive"] is True
        refused = await bob.call_tool(
            "reservation_create", {"patterns": ["src/app/*.py"], "ttl_seconds": 60}
        )
        conflict = error_of(refused)
        assert status_of(refused) == 409 and conflict["code"] == "RESERVATION_CONFLICT"
        assert [c["reservation_id"] for c in conflict["conflicts"]] == [held["reservation_id"]]
        assert conflict["conflicts"][0]["reason"] == "parser rewrite"
        assert conflict["conflicts"][0]["example_path"].startswith("src/app/")

        checked = answer_of(
            await bob.call_tool("reservation_check", {"paths": ["src/app/x.py", "README.md"]})
        )
        assert [c["path"] for c in checked["conflicts"]] == ["src/app/x.py"]
        own = answer_of(await alice.call_tool("reservation_check", {"paths": ["src/app/x.py"]}))
        assert own == {"conflicts": []}

        taken = await bob.call_tool(
            "reservation_release", {"reservation_id": held["reservation_id"]}
        )
        assert error_of(taken)["code"] == "PERMISSION_DENIED" and status_of(taken) == 403
        released = answer_of(
            await alice.call_tool("reservation_release", {"reservation_id": held["reservation_id"]})
        )
        assert released == {"reservation_id": held["reservation_id"], "released": True}
        again = await alice.call_tool(
            "reservation_release", {"reservation_id": held["reservation_id"]}
        )
        assert error_of(again)["code"] == "RESERVATION_NOT_FOUND" and status_of(again) == 404
        granted = answer_of(
            await bob.call_tool(
                "reservation_create", {"patterns": ["src/app/*.py"], "ttl_seconds": 60}
            )
        )
        assert granted["holder"] == "bob"


async def test_refusals_are_tool_errors_carrying_the_api_envelope(live_server_url):
    _, alice = await key("alice", WRITER)
    _, reader = await key("reader", ["shard:read"])
    _, scoped = await key("scoped", WRITER, shard_prefixes=["team."])
    async with mcp_session(live_server_url, alice, "alice") as mcp:
        answer_of(
            await mcp.call_tool(
                "shard_create", {"id": "doc", "type": "decision", "initial_value": 1}
            )
        )
        answer_of(
            await mcp.call_tool(
                "shard_commit", {"shard_id": "doc", "expected_version": 1, "new_value": 2}
            )
        )
        stale = await mcp.call_tool(
            "shard_commit", {"shard_id": "doc", "expected_version": 1, "new_value": 3}
        )
        assert status_of(stale) == 409
        assert error_of(stale) | {"message": ""} == {
            "code": "STALE_VERSION",
            "message": "",
            "expected_version": 1,
            "current_version": 2,
            "current_value": 2,
        }
        answer_of(
            await mcp.call_tool(
                "shard_create",
                {"id": "payments", "type": "decision", "initial_value": 0, "reversible": False},
            )
        )
        gated = await mcp.call_tool(
            "shard_commit", {"shard_id": "payments", "expected_version": 1, "new_value": 100}
        )
        assert (error_of(gated)["code"], status_of(gated)) == ("APPROVAL_REQUIRED", 403)
        missing = await mcp.call_tool("shard_read", {"shard_id": "nowhere"})
        assert (error_of(missing)["code"], status_of(missing)) == ("SHARD_NOT_FOUND", 404)
        for bad in (
            {"shard_id": "doc", "expected_version": "one", "new_value": 3},
            {"shard_id": "../api/audit", "expected_version": 1, "new_value": 3},
            {"shard_id": 7},
        ):
            refused = await mcp.call_tool("shard_commit", bad)
            assert (error_of(refused)["code"], status_of(refused)) == ("VALIDATION_ERROR", 400)
        wait = await mcp.call_tool(
            "approval_get", {"approval_id": "apr_" + "0" * 24, "wait_seconds": 99}
        )
        assert (
            error_of(wait)["code"] == "VALIDATION_ERROR"
            and "wait_seconds" in error_of(wait)["fields"]
        )
    async with mcp_session(live_server_url, reader, "rita") as mcp:
        denied = await mcp.call_tool(
            "shard_commit", {"shard_id": "doc", "expected_version": 2, "new_value": 3}
        )
        assert (error_of(denied)["code"], error_of(denied)["permission"]) == (
            "PERMISSION_DENIED",
            "shard:write",
        )
    async with mcp_session(live_server_url, scoped, "sam") as mcp:
        outside = await mcp.call_tool("shard_read", {"shard_id": "doc"})
        assert error_of(outside)["code"] == "PERMISSION_DENIED"
        assert error_of(outside)["shard_ids"] == ["doc"]


async def test_a_call_without_a_usable_key_is_answered_401_before_any_json_rpc(live_server_url):
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=live_server_url, timeout=10) as http:
        nobody = await http.post("/mcp", json=call, headers=headers)
        wrong = await http.post("/mcp", json=call, headers=headers | {"X-API-Key": "zl_nope"})
        bearer_wrong = await http.post(
            "/mcp", json=call, headers=headers | {"Authorization": "Bearer zl_nope"}
        )
    for answer in (nobody, wrong, bearer_wrong):
        assert answer.status_code == 401
        assert answer.headers["content-type"] == "application/json"
        assert "jsonrpc" not in answer.json()
    assert nobody.json()["error"]["code"] == "UNAUTHENTICATED"
    assert wrong.json()["error"]["code"] == bearer_wrong.json()["error"]["code"]


async def test_a_bearer_key_bound_to_one_agent_acts_as_that_agent(live_server_url):
    _, bound = await key("bound", WRITER, agent_ids=["builder-7"])
    async with mcp_session(live_server_url, bound, bearer=True) as mcp:
        created = answer_of(
            await mcp.call_tool("shard_create", {"id": "b", "type": "decision", "initial_value": 0})
        )
    assert created["created_by"] == "builder-7"
    _, free = await key("free", WRITER)
    async with mcp_session(live_server_url, free) as mcp:
        refused = await mcp.call_tool(
            "shard_commit", {"shard_id": "b", "expected_version": 1, "new_value": 1}
        )
    assert error_of(refused)["code"] == "AGENT_ID_REQUIRED"


async def test_a_tool_call_writes_the_same_audit_entry_as_the_rest_call(live_server_url):
    alice_key, alice = await key("alice", WRITER)
    async with mcp_session(live_server_url, alice, "alice") as mcp:
        answer_of(
            await mcp.call_tool(
                "shard_create", {"id": "mcp.s", "type": "decision", "initial_value": 0}
            )
        )
        via_mcp = answer_of(
            await mcp.call_tool(
                "shard_commit", {"shard_id": "mcp.s", "expected_version": 1, "new_value": 5}
            )
        )
    headers = {"X-API-Key": alice, "X-Agent-Id": "alice"}
    async with httpx.AsyncClient(base_url=live_server_url, headers=headers) as http:
        made = await http.post(
            "/api/shards", json={"id": "rest.s", "type": "decision", "initial_value": 0}
        )
        assert made.status_code == 201
        via_rest = (
            await http.post(
                "/api/shards/rest.s/commit", json={"expected_version": 1, "new_value": 5}
            )
        ).json()

    def entries() -> list[dict[str, Any]]:
        rows = AuditEntry.objects.filter(
            id__in=[via_mcp["audit_entry_id"], via_rest["audit_entry_id"]]
        )
        return list(rows.order_by("id").values(*AUDITED, "value", "details"))

    mcp_entry, rest_entry = await sync_to_async(entries)()
    assert mcp_entry["shard_id"] == "mcp.s" and rest_entry["shard_id"] == "rest.s"
    assert mcp_entry | {"shard_id": ""} == rest_entry | {"shard_id": ""}
    assert mcp_entry["key_prefix"] == alice_key.prefix and mcp_entry["agent_id"] == "alice"


async def test_an_approval_asked_over_mcp_and_decided_over_rest_is_seen_committed(live_server_url):
    _, alice = await key("alice", WRITER)
    _, officer = await key("officer", ["shard:read", "approval:decide"])
    async with mcp_session(live_server_url, alice, "alice") as mcp:
        answer_of(
            await mcp.call_tool(
                "shard_create",
                {
                    "id": "wire",
                    "type": "decision",
                    "initial_value": {"sent": 0},
                    "reversible": False,
                },
            )
        )
        asked = answer_of(
            await mcp.call_tool(
                "approval_request",
                {
                    "shard_id": "wire",
                    "proposed_value": {"sent": 250},
                    "expected_version": 1,
                    "description": "Send 250 to the supplier",
                },
            )
        )
        assert asked["status"] == "pending"
        assert asked["console_url"] == f"{live_server_url}/console/approvals/{asked['id']}"
        quick = answer_of(await mcp.call_tool("approval_get", {"approval_id": asked["id"]}))
        assert quick["status"] == "pending"

        async def officer_approves() -> None:
            await asyncio.sleep(1.0)
            headers = {"X-API-Key": officer, "X-Agent-Id": "olga"}
            async with httpx.AsyncClient(base_url=live_server_url, headers=headers) as http:
                decided = await http.post(f"/api/approvals/{asked['id']}/approve", json={})
                assert decided.status_code == 200, decided.text

        loop = asyncio.get_running_loop()
        started = loop.time()
        approving = asyncio.create_task(officer_approves())
        waited = answer_of(
            await mcp.call_tool("approval_get", {"approval_id": asked["id"], "wait_seconds": 20})
        )
        took = loop.time() - started
        await approving
        assert waited["status"] == "committed", waited
        assert waited["commit"]["version"] == 2
        # The wait ended with the decision, not at its end.
        assert 0.9 < took < 10
        read = answer_of(await mcp.call_tool("shard_read", {"shard_id": "wire"}))
        assert (read["version"], read["value"]) == (2, {"sent": 250})


async def test_a_wait_on_an_undecided_approval_ends_at_its_wait_seconds(live_server_url):
    _, alice = await key("alice", WRITER)
    async with mcp_session(live_server_url, alice, "alice") as mcp:
        answer_of(
            await mcp.call_tool(
                "shard_create",
                {"id": "w", "type": "decision", "initial_value": 0, "reversible": False},
            )
        )
        asked = answer_of(
            await mcp.call_tool(
                "approval_request",
                {"shard_id": "w", "proposed_value": 1, "expected_version": 1, "description": "x"},
            )
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        still = answer_of(
            await mcp.call_tool("approval_get", {"approval_id": asked["id"], "wait_seconds": 2})
        )
        took = loop.time() - started
    assert still["status"] == "pending"
    assert 1.9 < took < 6


async def test_shards_and_pending_approvals_are_resources(live_server_url):
    _, alice = await key("alice", WRITER)
    async with mcp_session(live_server_url, alice, "alice") as mcp:
        answer_of(
            await mcp.call_tool(
                "shard_create",
                {"id": "r", "type": "decision", "initial_value": {"k": 1}, "reversible": False},
            )
        )
        answer_of(
            await mcp.call_tool(
                "approval_request",
                {
                    "shard_id": "r",
                    "proposed_value": {"k": 2},
                    "expected_version": 1,
                    "description": "d",
                },
            )
        )
        listed = await mcp.list_resources()
        templates = await mcp.list_resource_templates()
        shard = await mcp.read_resource("zerolock://shards/r")
        pending = await mcp.read_resource("zerolock://approvals/pending")

    assert [str(r.uri) for r in listed.resources] == ["zerolock://approvals/pending"]
    assert [t.uri_template for t in templates.resource_templates] == [
        "zerolock://shards/{shard_id}"
    ]
    value = json.loads(shard.contents[0].text)
    assert (value["version"], value["value"]) == (1, {"k": 1})
    assert [a["shard_id"] for a in json.loads(pending.contents[0].text)["results"]] == ["r"]


async def test_rate_limits_count_tool_calls_and_rest_calls_against_one_key(live_server_url):
    _, limited = await key("limited", WRITER, rate_limit=6)
    headers = {"X-API-Key": limited, "X-Agent-Id": "lim"}
    async with httpx.AsyncClient(base_url=live_server_url, headers=headers) as http:
        assert (
            await http.post("/api/shards", json={"id": "rl", "type": "decision"})
        ).status_code == 201
        for _ in range(2):
            assert (await http.get("/api/shards/rl")).status_code == 200
    async with mcp_session(live_server_url, limited, "lim") as mcp:
        answers = [await mcp.call_tool("shard_read", {"shard_id": "rl"}) for _ in range(5)]
    statuses = [status_of(a) for a in answers]
    # The tools' schema read counts once too (the first call in this process).
    assert 429 in statuses and statuses[0] == 200
    refused = next(a for a in answers if status_of(a) == 429)
    assert error_of(refused)["code"] == "RATE_LIMITED" and error_of(refused)["retry_after"] >= 1
    assert statuses == sorted(statuses)  # once refused, refused until the window moves


async def test_a_key_bound_to_other_agents_cannot_act_as_another_over_mcp(live_server_url):
    _, bound = await key("bound", WRITER, agent_ids=["builder-7"])
    async with mcp_session(live_server_url, bound, "mallory") as mcp:
        refused = await mcp.call_tool("shard_read", {"shard_id": "anything"})
    assert (error_of(refused)["code"], status_of(refused)) == ("AGENT_NOT_ALLOWED", 403)


async def test_a_commit_retried_with_its_idempotency_key_writes_once(live_server_url):
    _, alice = await key("alice", WRITER)
    commit = {"shard_id": "i", "expected_version": 1, "new_value": 1, "idempotency_key": "i-1"}
    async with mcp_session(live_server_url, alice, "alice") as mcp:
        answer_of(
            await mcp.call_tool("shard_create", {"id": "i", "type": "decision", "initial_value": 0})
        )
        first = answer_of(await mcp.call_tool("shard_commit", commit))
        again = answer_of(await mcp.call_tool("shard_commit", commit))
        read = answer_of(await mcp.call_tool("shard_read", {"shard_id": "i"}))
    assert first == again and first["version"] == 2
    assert read["version"] == 2
