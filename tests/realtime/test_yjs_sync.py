"""Yjs sync on /ws/crdt/{shard_id}: real CRDT clients share additive shards."""

from __future__ import annotations

import asyncio
import json

import httpx
import pycrdt
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from httpx_ws import aconnect_ws
from pycrdt import (
    YMessageType,
    YSyncMessageType,
    create_sync_message,
    create_update_message,
    handle_sync_message,
)
from pycrdt.websocket.websocket import HttpxWebsocket

from access.identity import Actor
from access.services import api_key_create
from audit.models import AuditEntry
from shards.models import CrdtUpdate, Shard
from shards.selectors import shard_get
from shards.services import additive_commit, shard_create
from zerolock_site.asgi import application

DB = pytest.mark.django_db(transaction=True)


def local_doc(crdt_type: str) -> tuple[pycrdt.Doc, object]:
    doc = pycrdt.Doc()
    root = {"map": pycrdt.Map, "array": pycrdt.Array, "text": pycrdt.Text}[crdt_type]()
    doc["value"] = root
    return doc, root


async def a_shard(shard_id: str, crdt_type: str, initial=None, **extra) -> None:
    await sync_to_async(shard_create)(
        actor=Actor("creator"),
        shard_id=shard_id,
        shard_type="additive",
        crdt_type=crdt_type,
        initial_value=initial,
        **extra,
    )


async def a_key(*permissions: str) -> str:
    _, raw = await sync_to_async(api_key_create)(
        name="yjs", permissions=list(permissions) or ["shard:read", "shard:write"]
    )
    return raw


def socket_to(shard_id: str, key: str | None, agent: str | None = "editor-1"):
    headers = []
    if key:
        headers.append((b"x-api-key", key.encode()))
    if agent:
        headers.append((b"x-agent-id", agent.encode()))
    return WebsocketCommunicator(application, f"/ws/crdt/{shard_id}", headers=headers)


async def synced(communicator: WebsocketCommunicator, doc: pycrdt.Doc) -> None:
    """The client half of the handshake: answer the server's step 1, send ours,
    apply the server's step 2."""
    server_step1 = await communicator.receive_from()
    assert server_step1[:2] == bytes([YMessageType.SYNC, YSyncMessageType.SYNC_STEP1])
    await communicator.send_to(bytes_data=handle_sync_message(server_step1[1:], doc))
    await communicator.send_to(bytes_data=create_sync_message(doc))
    step2 = await communicator.receive_from()
    assert step2[:2] == bytes([YMessageType.SYNC, YSyncMessageType.SYNC_STEP2])
    handle_sync_message(step2[1:], doc)


async def refusal(communicator: WebsocketCommunicator) -> tuple[dict, int]:
    frame = await communicator.receive_output()
    while frame["type"] == "websocket.send" and frame.get("bytes"):
        frame = await communicator.receive_output()
    error = json.loads(frame["text"])
    closed = await communicator.receive_output()
    assert closed["type"] == "websocket.close"
    return error, closed["code"]


@DB
async def test_a_client_syncs_the_stored_document_and_sees_rest_commits_at_once():
    await a_shard("notes", "map", {"owner": "ops", "count": 1})
    communicator = socket_to("notes", await a_key())
    assert (await communicator.connect())[0]
    doc, root = local_doc("map")
    await synced(communicator, doc)
    assert root.to_py() == {"owner": "ops", "count": 1.0}

    shard = await sync_to_async(shard_get)("notes", payload=False)
    await sync_to_async(additive_commit)(
        actor=Actor("planner"), shard=shard, body={"new_value": {"status": "go"}}
    )
    pushed = await communicator.receive_from(timeout=10)
    assert pushed[:2] == bytes([YMessageType.SYNC, YSyncMessageType.SYNC_UPDATE])
    handle_sync_message(pushed[1:], doc)
    assert root.to_py()["status"] == "go"
    await communicator.disconnect()


@DB
async def test_a_client_edit_is_stored_versioned_audited_and_pushed_to_the_other_clients():
    await a_shard("log", "array", ["first"])
    key = await a_key()
    editor, watcher = socket_to("log", key, "editor-1"), socket_to("log", key, "watcher-1")
    assert (await editor.connect())[0] and (await watcher.connect())[0]
    editor_doc, editor_root = local_doc("array")
    watcher_doc, watcher_root = local_doc("array")
    await synced(editor, editor_doc)
    await synced(watcher, watcher_doc)

    before = editor_doc.get_state()
    editor_root.append({"step": 2})
    await editor.send_to(bytes_data=create_update_message(editor_doc.get_update(before)))

    pushed = await watcher.receive_from(timeout=10)
    handle_sync_message(pushed[1:], watcher_doc)
    assert watcher_root.to_py() == ["first", {"step": 2.0}]
    assert await editor.receive_nothing(timeout=0.2)  # no echo to the sender

    shard = await sync_to_async(Shard.objects.get)(pk="log")
    assert shard.version == 2 and shard.updated_by == "editor-1"
    entry = await sync_to_async(AuditEntry.objects.filter(shard_id="log").last)()
    assert (entry.action, entry.agent_id, entry.version_after) == ("shard.commit", "editor-1", 2)
    assert "yjs_update" in entry.value
    value = await sync_to_async(lambda: _value_of("log"))()
    assert value == ["first", {"step": 2}]  # integers come back as the client's JSON sent them
    await editor.disconnect()
    await watcher.disconnect()


def _value_of(shard_id: str):
    from shards.services import shard_read

    return shard_read(shard_id=shard_id, reader="test").value


@DB
@pytest.mark.parametrize(
    "garbage",
    [
        bytes([0, 2, 5, 1, 2, 3, 4, 5]),  # an update whose bytes decode to nothing
        bytes([0, 2]),  # an update message with no update
        bytes([0, 9, 1, 1]),  # an unknown sync message type
        bytes([7, 1, 2]),  # an unknown message type
    ],
)
async def test_malformed_update_bytes_get_a_clear_error_and_change_nothing(garbage):
    await a_shard("fragile", "text", "intact")
    communicator = socket_to("fragile", await a_key())
    assert (await communicator.connect())[0]
    await communicator.receive_from()  # the server's sync step 1
    await communicator.send_to(bytes_data=garbage)
    error, code = await refusal(communicator)
    assert error["error"]["code"] == "MALFORMED_UPDATE"
    assert code == 4400
    shard = await sync_to_async(Shard.objects.get)(pk="fragile")
    assert shard.version == 1
    assert await sync_to_async(CrdtUpdate.objects.filter(shard_id="fragile").count)() == 0
    assert await sync_to_async(_value_of)("fragile") == "intact"


@DB
async def test_a_decision_shard_cannot_be_opened_as_a_yjs_document():
    await sync_to_async(shard_create)(
        actor=Actor("creator"), shard_id="plan", shard_type="decision", initial_value={"a": 1}
    )
    communicator = socket_to("plan", await a_key())
    assert (await communicator.connect())[0]
    error, code = await refusal(communicator)
    assert error["error"]["code"] == "NOT_ADDITIVE"
    assert "additive" in error["error"]["message"]
    assert code == 4400


@DB
async def test_a_missing_shard_a_bad_key_and_a_foreign_agent_are_refused():
    missing = socket_to("nowhere", await a_key())
    assert (await missing.connect())[0]
    assert (await refusal(missing))[1] == 4404

    no_key = socket_to("nowhere", None)
    assert not (await no_key.connect())[0] or (await refusal(no_key))[1] == 4401

    await a_shard("bound", "map")
    _, bound = await sync_to_async(api_key_create)(
        name="bound", permissions=["shard:read"], agent_ids=["only-me"]
    )
    impostor = socket_to("bound", bound, agent="someone-else")
    assert (await impostor.connect())[0]
    error, code = await refusal(impostor)
    assert (error["error"]["code"], code) == ("AGENT_NOT_ALLOWED", 4403)


@DB
async def test_a_read_only_key_syncs_but_its_edits_are_refused():
    await a_shard("watched", "map", {"a": 1})
    communicator = socket_to("watched", await a_key("shard:read"))
    assert (await communicator.connect())[0]
    doc, root = local_doc("map")
    await synced(communicator, doc)
    assert root.to_py() == {"a": 1.0}
    before = doc.get_state()
    root["b"] = 2
    await communicator.send_to(bytes_data=create_update_message(doc.get_update(before)))
    error, code = await refusal(communicator)
    assert (error["error"]["code"], code) == ("PERMISSION_DENIED", 4403)
    assert await sync_to_async(_value_of)("watched") == {"a": 1}


@DB
async def test_an_edit_that_breaks_the_schema_or_the_gate_is_refused_and_not_stored():
    await a_shard(
        "typed",
        "map",
        {"n": 1},
        value_schema={"type": "object", "additionalProperties": {"type": "integer"}},
    )
    await a_shard("vault", "array", reversible=False)
    key = await a_key()
    for shard_id, crdt_type, edit, expected in [
        ("typed", "map", lambda root: root.__setitem__("n", "not a number"), "SCHEMA_VIOLATION"),
        ("vault", "array", lambda root: root.append("spend"), "APPROVAL_REQUIRED"),
    ]:
        communicator = socket_to(shard_id, key)
        assert (await communicator.connect())[0]
        doc, root = local_doc(crdt_type)
        await synced(communicator, doc)
        before = doc.get_state()
        edit(root)
        await communicator.send_to(bytes_data=create_update_message(doc.get_update(before)))
        error, _ = await refusal(communicator)
        assert error["error"]["code"] == expected
        assert (await sync_to_async(Shard.objects.get)(pk=shard_id)).version == 1
    assert await sync_to_async(_value_of)("typed") == {"n": 1}


@pytest.mark.live
@DB
def test_an_unmodified_pycrdt_client_syncs_a_shard_through_a_live_server(live_server_url):
    """pycrdt's own Provider over pycrdt-websocket's httpx channel, against the live server."""
    _, key = api_key_create(
        name="pycrdt", permissions=["shard:read", "shard:write", "shard:create"]
    )
    api = httpx.Client(
        base_url=live_server_url, headers={"X-API-Key": key, "X-Agent-Id": "rest-agent"}
    )
    assert (
        api.post(
            "/api/shards",
            json={
                "id": "shared-text",
                "type": "additive",
                "crdt_type": "text",
                "initial_value": "Hello",
            },
        ).status_code
        == 201
    )
    ws_url = live_server_url.replace("http://", "ws://") + "/ws/crdt/shared-text"

    async def until(predicate, what: str) -> None:
        for _ in range(100):
            if predicate():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    async def scenario() -> None:
        doc = pycrdt.Doc()
        text = doc.get("value", type=pycrdt.Text)
        async with (
            aconnect_ws(ws_url, headers={"X-API-Key": key, "X-Agent-Id": "yjs-editor"}) as ws,
            pycrdt.Provider(doc, HttpxWebsocket(ws, "shared-text")) as provider,
        ):
            await provider.synced.wait()
            await until(lambda: str(text) == "Hello", "the stored text")
            # A REST commit reaches the client at once...
            response = await asyncio.to_thread(
                api.post,
                "/api/shards/shared-text/commit",
                json={"delta": [{"retain": 5}, {"insert": ", world"}]},
            )
            assert response.status_code == 200
            await until(lambda: str(text) == "Hello, world", "the REST commit")
            # ...and the client's own edit shows in the REST API.
            text.insert(0, ">> ")

            def stored() -> str:
                return api.get("/api/shards/shared-text").json()["value"]

            for _ in range(100):
                if await asyncio.to_thread(stored) == ">> Hello, world":
                    break
                await asyncio.sleep(0.05)
            assert await asyncio.to_thread(stored) == ">> Hello, world"

    asyncio.run(scenario())
    shard = api.get("/api/shards/shared-text").json()
    assert shard["version"] == 3
    history = api.get("/api/shards/shared-text/history").json()
    assert [entry["agent_id"] for entry in history if entry["version"] > 1] == [
        "rest-agent",
        "yjs-editor",
    ]
