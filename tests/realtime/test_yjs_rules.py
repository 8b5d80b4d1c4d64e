"""The Yjs path holds the same rules as REST (issue 16, finding 12): a key's
changes reach open /ws/crdt/ sockets, and additive arrays stay append-only."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from pycrdt import create_update_message

from access.identity import Actor
from access.models import ApiKey
from access.services import api_key_create, api_key_update
from shards.models import Shard
from shards.selectors import shard_get
from shards.services import additive_commit
from tests.realtime.test_yjs_sync import a_shard, local_doc, refusal, socket_to, synced

DB = pytest.mark.django_db(transaction=True)


async def editor_key(**grants) -> tuple[ApiKey, str]:
    return await sync_to_async(api_key_create)(
        name="editor", permissions=["shard:read", "shard:write"], **grants
    )


async def send_edit(socket, doc, edit) -> None:
    before = doc.get_state()
    edit()
    await socket.send_to(bytes_data=create_update_message(doc.get_update(before)))


def version_of(shard_id: str) -> int:
    return Shard.objects.get(pk=shard_id).version


def value_of(shard_id: str):
    from shards.selectors import shard_current_value

    return shard_current_value(shard_get(shard_id))


@DB
async def test_a_key_that_loses_shard_write_can_no_longer_write_through_its_open_socket():
    await a_shard("notes", "map", {"a": 1})
    key, raw = await editor_key()
    socket = socket_to("notes", raw, agent="editor-1")
    assert (await socket.connect())[0]
    doc, root = local_doc("map")
    await synced(socket, doc)
    await send_edit(socket, doc, lambda: root.__setitem__("b", 2))
    assert await socket.receive_nothing(timeout=0.3)
    assert await sync_to_async(version_of)("notes") == 2

    await sync_to_async(api_key_update)(key=key, changed_by="admin", permissions=["shard:read"])
    await send_edit(socket, doc, lambda: root.__setitem__("c", 3))
    error, code = await refusal(socket)
    assert (error["error"]["code"], code) == ("PERMISSION_DENIED", 4403)
    assert await sync_to_async(version_of)("notes") == 2
    assert await sync_to_async(value_of)("notes") == {"a": 1, "b": 2}


@DB
async def test_a_key_moved_out_of_the_shards_scope_has_its_socket_closed_within_a_second():
    await a_shard("team-a:notes", "map", {"a": 1})
    key, raw = await editor_key(shard_prefixes=["team-a:"])
    socket = socket_to("team-a:notes", raw, agent="editor-1")
    assert (await socket.connect())[0]
    await synced(socket, local_doc("map")[0])

    await sync_to_async(api_key_update)(key=key, changed_by="admin", shard_prefixes=["team-b:"])
    error, code = await asyncio.wait_for(refusal(socket), timeout=1.5)
    assert (error["error"]["code"], code) == ("PERMISSION_DENIED", 4403)


@DB
async def test_a_key_that_gains_a_permission_keeps_its_socket():
    await a_shard("notes", "map", {"a": 1})
    key, raw = await sync_to_async(api_key_create)(name="reader", permissions=["shard:read"])
    socket = socket_to("notes", raw, agent="editor-1")
    assert (await socket.connect())[0]
    doc, root = local_doc("map")
    await synced(socket, doc)
    await sync_to_async(api_key_update)(
        key=key, changed_by="admin", permissions=["shard:read", "shard:write"]
    )
    assert await socket.receive_nothing(timeout=1.2)  # keywatch has polled: still open
    await send_edit(socket, doc, lambda: root.__setitem__("b", 2))
    assert await socket.receive_nothing(timeout=0.3)
    assert await sync_to_async(value_of)("notes") == {"a": 1, "b": 2}
    await socket.disconnect()


@DB
async def test_clear_from_a_yjs_client_leaves_the_array_intact():
    await a_shard("log", "array", ["from-ann"])
    shard = await sync_to_async(shard_get)("log", payload=False)
    await sync_to_async(additive_commit)(
        actor=Actor("bo"), shard=shard, body={"append": ["from-bo"]}
    )
    _, raw = await editor_key()
    mallory, watcher = socket_to("log", raw, "mallory"), socket_to("log", raw, "watcher")
    assert (await mallory.connect())[0] and (await watcher.connect())[0]
    doc, root = local_doc("array")
    await synced(mallory, doc)
    await synced(watcher, local_doc("array")[0])
    assert root.to_py() == ["from-ann", "from-bo"]
    # Bo's push is fire-and-forget and may still be on its way to the watcher.
    while not await watcher.receive_nothing(timeout=0.3):
        await watcher.receive_from()

    await send_edit(mallory, doc, lambda: (root.clear(), root.append("only-mine")))
    error, code = await refusal(mallory)
    assert (error["error"]["code"], code) == ("UNSUPPORTED_DIFF", 4400)
    assert await sync_to_async(version_of)("log") == 2
    assert await sync_to_async(value_of)("log") == ["from-ann", "from-bo"]
    assert await watcher.receive_nothing(timeout=0.3)

    # The shard still takes appends (from a fresh, honest client).
    honest = socket_to("log", raw, "honest")
    assert (await honest.connect())[0]
    doc, root = local_doc("array")
    await synced(honest, doc)
    await send_edit(honest, doc, lambda: root.append("from-cy"))
    pushed = await watcher.receive_from(timeout=2)
    assert pushed
    assert await sync_to_async(value_of)("log") == ["from-ann", "from-bo", "from-cy"]
    await honest.disconnect()
    await watcher.disconnect()


@DB
async def test_map_key_deletes_and_text_cuts_from_yjs_clients_are_stored():
    """Map and text keep their documented semantics: a key removed, text deleted
    (delete-only Yjs updates, which used to be dropped as if empty)."""
    await a_shard("settings", "map", {"keep": 1, "drop": 2})
    await a_shard("draft", "text", "hello world")
    _, raw = await editor_key()
    for shard_id, crdt_type, edit, expected in [
        ("settings", "map", lambda root: root.pop("drop"), {"keep": 1}),
        ("draft", "text", lambda root: root.__delitem__(slice(5, 11)), "hello"),
    ]:
        socket = socket_to(shard_id, raw, "editor-1")
        assert (await socket.connect())[0]
        doc, root = local_doc(crdt_type)
        await synced(socket, doc)
        await send_edit(socket, doc, lambda root=root, edit=edit: edit(root))
        assert await socket.receive_nothing(timeout=0.3)
        assert await sync_to_async(value_of)(shard_id) == expected
        assert await sync_to_async(version_of)(shard_id) == 2
        await socket.disconnect()
