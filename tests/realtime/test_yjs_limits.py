"""Yjs updates held to the body limit, to the shard's own root and to the
per-shard cap (hardening round three, M3): pycrdt clients over real sockets
against live uvicorn servers."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pycrdt
import pytest
import websockets
from httpx_ws import WebSocketDisconnect, aconnect_ws
from pycrdt import create_sync_message, create_update_message, handle_sync_message
from pycrdt.websocket.websocket import HttpxWebsocket

from access.identity import Actor
from access.services import api_key_create
from shards.models import CrdtUpdate, Shard
from shards.services import shard_create
from tests.conftest import server_env, start_server, stop_server

DB = pytest.mark.django_db(transaction=True)
MiB = 1024 * 1024
SHARD_CAP = 64 * 1024
WAIT = 30  # seconds: a shared, slow machine


@pytest.fixture(scope="module")
def capped_server(django_db_setup, django_db_blocker):
    """The default body limit (1 MiB), and a per-shard cap small enough to reach."""
    proc, url = start_server({**server_env(), "ZEROLOCK_MAX_SHARD_BYTES": str(SHARD_CAP)})
    yield proc, url
    stop_server(proc)


@pytest.fixture(scope="module")
def roomy_server(django_db_setup, django_db_blocker):
    """A body limit of 8 MiB: a 2 MB update is within it, so only the root rule
    stands between it and the shard."""
    proc, url = start_server({**server_env(), "ZEROLOCK_MAX_BODY_BYTES": str(8 * MiB)})
    yield proc, url
    stop_server(proc)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def a_key() -> str:
    return api_key_create(name="yjs", permissions=["shard:read", "shard:write", "shard:create"])[1]


def headers(key: str, agent: str = "editor-1") -> dict[str, str]:
    return {"X-API-Key": key, "X-Agent-Id": agent}


def ws_url(url: str, shard_id: str) -> str:
    return url.replace("http://", "ws://") + f"/ws/crdt/{shard_id}"


def stored(shard_id: str) -> tuple[int, object, int]:
    """Version, value as REST shows it, and the bytes the database holds of the Doc."""
    from shards.selectors import shard_current_value, shard_get

    shard = Shard.objects.get(pk=shard_id)
    logged = CrdtUpdate.objects.filter(shard_id=shard_id, version__gt=shard.crdt_state_version)
    size = len(bytes(shard.crdt_state)) + sum(len(bytes(u.update)) for u in logged)
    return shard.version, shard_current_value(shard_get(shard_id)), size


async def synced(ws, doc: pycrdt.Doc) -> None:
    """pycrdt's half of the sync handshake, by hand, so refusals can be read."""
    server_step1 = await ws.receive_bytes(timeout=WAIT)
    await ws.send_bytes(handle_sync_message(server_step1[1:], doc))
    await ws.send_bytes(create_sync_message(doc))
    handle_sync_message((await ws.receive_bytes(timeout=WAIT))[1:], doc)


async def refusal(ws) -> tuple[dict, int]:
    """The error frame, then the close code (binary frames in between are skipped)."""
    while True:
        message = await ws.receive(timeout=WAIT)
        if hasattr(message, "data") and isinstance(message.data, str):
            error = json.loads(message.data)
            break
    with pytest.raises(WebSocketDisconnect) as closed:
        while True:
            await ws.receive(timeout=WAIT)
    return error["error"], closed.value.code


async def edit_and_send(ws, doc: pycrdt.Doc, edit) -> None:
    before = doc.get_state()
    edit(doc)
    await ws.send_bytes(create_update_message(doc.get_update(before)))


# --- per update: the body limit -----------------------------------------------------


@pytest.mark.live
@DB
def test_a_2_mib_update_is_refused_with_4413_and_the_shard_is_unchanged(capped_server):
    _, url = capped_server
    key = a_key()
    shard_create(
        actor=Actor("t"), shard_id="big-frame", shard_type="additive", crdt_type="text",
        initial_value="intact",
    )  # fmt: skip
    before = stored("big-frame")

    async def scenario() -> tuple[dict, int]:
        async with aconnect_ws(ws_url(url, "big-frame"), headers=headers(key)) as ws:
            doc = pycrdt.Doc()
            text = doc.get("value", type=pycrdt.Text)
            await synced(ws, doc)
            await edit_and_send(ws, doc, lambda _: text.insert(0, "x" * (2 * MiB)))
            return await refusal(ws)

    error, code = asyncio.run(scenario())
    assert (error["code"], error["limit_bytes"], code) == ("PAYLOAD_TOO_LARGE", MiB, 4413)
    assert stored("big-frame") == before


@pytest.mark.live
@DB
def test_uvicorn_closes_a_16_mib_frame_with_1009_without_reading_it(capped_server):
    proc, url = capped_server
    key = a_key()
    shard_create(actor=Actor("t"), shard_id="huge-frame", shard_type="additive", crdt_type="map")
    before = stored("huge-frame")
    rss_before = rss_kib(proc.pid)

    async def scenario() -> int:
        async with websockets.connect(
            ws_url(url, "huge-frame"), additional_headers=headers(key), max_size=None
        ) as ws:
            await ws.recv()  # the server's sync step 1
            doc = pycrdt.Doc()
            # Just under uvicorn's own default cap (16 MiB), which let it through.
            doc.get("value", type=pycrdt.Map)["k"] = "x" * (16 * MiB - 1024)
            try:
                await ws.send(create_update_message(doc.get_update()))
                await asyncio.wait_for(ws.recv(), timeout=WAIT)
            except websockets.ConnectionClosed:
                pass
            await asyncio.wait_for(ws.wait_closed(), timeout=WAIT)
            assert ws.close_code is not None
            return ws.close_code

    assert asyncio.run(scenario()) == 1009
    grown = rss_kib(proc.pid) - rss_before
    print(f"server RSS grew {grown} KiB for a 16 MiB frame")
    assert grown < 8 * 1024
    assert stored("huge-frame") == before
    assert httpx.get(f"{url}/api/health", timeout=WAIT).status_code == 200


# --- roots: only `value` ---------------------------------------------------------


@pytest.mark.live
@DB
def test_a_2_mb_map_under_another_root_is_refused_stored_nowhere_and_sent_to_no_one(
    roomy_server,
):
    _, url = roomy_server
    key = a_key()
    shard_create(
        actor=Actor("t"), shard_id="rooted", shard_type="additive", crdt_type="map",
        initial_value={"ok": "yes"},
        value_schema={"type": "object", "additionalProperties": {"type": "string", "maxLength": 10}},
    )  # fmt: skip
    before = stored("rooted")

    async def scenario() -> tuple[tuple[dict, int], pycrdt.Doc]:
        watcher_doc = pycrdt.Doc()
        watched = watcher_doc.get("value", type=pycrdt.Map)
        async with (
            aconnect_ws(ws_url(url, "rooted"), headers=headers(key, "watcher")) as watcher_ws,
            pycrdt.Provider(watcher_doc, HttpxWebsocket(watcher_ws, "rooted")) as provider,
            aconnect_ws(
                ws_url(url, "rooted"), headers=headers(key), max_message_size_bytes=8 * MiB
            ) as ws,
        ):
            await provider.synced.wait()
            doc = pycrdt.Doc()
            await synced(ws, doc)

            def smuggle(doc: pycrdt.Doc) -> None:
                with doc.transaction():
                    doc.get("value", type=pycrdt.Map)["also"] = "fine"  # passes the schema
                    other = doc.get("other", type=pycrdt.Map)
                    for n in range(20):
                        other[f"blob{n}"] = "x" * 100_000

            await edit_and_send(ws, doc, smuggle)
            refused = await refusal(ws)
            # A later change reaches the watcher: had the refused update been relayed,
            # it would have come first.
            async with httpx.AsyncClient(base_url=url, headers=headers(key, "rest")) as api:
                response = await api.post(
                    "/api/shards/rooted/commit", json={"new_value": {"after": "x"}}
                )
                assert response.status_code == 200
            for _ in range(WAIT * 20):
                if "after" in watched:
                    break
                await asyncio.sleep(0.05)
            return refused, watcher_doc

    (error, code), watcher_doc = asyncio.run(scenario())
    assert (error["code"], error["root"], code) == ("UNSUPPORTED_UPDATE", "other", 4400)
    assert sorted(watcher_doc.keys()) == ["value"]
    assert watcher_doc.get("value", type=pycrdt.Map).to_py() == {"ok": "yes", "after": "x"}
    version, value, size = stored("rooted")
    assert (version, value) == (before[0] + 1, {"ok": "yes", "after": "x"})
    assert size < before[2] + 1000  # the REST commit only


# --- per shard: the cap -----------------------------------------------------------


@pytest.mark.live
@DB
def test_a_shard_at_its_cap_refuses_the_next_write_over_rest_and_yjs_and_takes_smaller_ones(
    capped_server,
):
    _, url = capped_server
    key = a_key()
    shard_create(actor=Actor("t"), shard_id="capped", shard_type="additive", crdt_type="array")
    api = httpx.Client(base_url=url, headers=headers(key, "rest"), timeout=WAIT)
    while stored("capped")[2] + 1200 < SHARD_CAP:
        assert (
            api.post("/api/shards/capped/commit", json={"append": ["r" * 1000]}).status_code == 200
        )
    full = stored("capped")

    response = api.post("/api/shards/capped/commit", json={"append": ["r" * 4000]})
    assert response.status_code == 413
    assert (response.json()["error"]["code"], response.json()["error"]["limit_bytes"]) == (
        "SHARD_TOO_LARGE",
        SHARD_CAP,
    )
    assert stored("capped") == full

    async def yjs_append(item: str) -> tuple[dict, int] | None:
        async with aconnect_ws(
            ws_url(url, "capped"), headers=headers(key), max_message_size_bytes=MiB
        ) as ws:
            doc = pycrdt.Doc()
            items = doc.get("value", type=pycrdt.Array)
            await synced(ws, doc)
            await edit_and_send(ws, doc, lambda _: items.append(item))
            try:
                return await asyncio.wait_for(refusal(ws), timeout=2)
            except TimeoutError:
                return None  # no refusal: the update was taken

    error, code = asyncio.run(yjs_append("y" * 4000))
    assert (error["code"], error["limit_bytes"], code) == ("SHARD_TOO_LARGE", SHARD_CAP, 4413)
    assert stored("capped") == full

    assert asyncio.run(yjs_append("small")) is None
    for _ in range(WAIT * 20):
        if stored("capped")[0] == full[0] + 1:
            break
        time.sleep(0.05)
    assert api.post("/api/shards/capped/commit", json={"append": ["tiny"]}).status_code == 200
    version, value, size = stored("capped")
    assert version == full[0] + 2 and value[-2:] == ["small", "tiny"] and size <= SHARD_CAP


# --- nesting, strings: what the shard's JSON value may hold ---------------------------


def _nest(node):
    child = pycrdt.Map()
    if isinstance(node, pycrdt.Map):
        node["k"] = child
    else:
        node.append(child)
    return child


async def _send_and_refusal(url: str, key: str, shard_id: str, update: bytes) -> tuple[dict, int]:
    async with aconnect_ws(
        ws_url(url, shard_id), headers=headers(key), max_message_size_bytes=MiB
    ) as ws:
        await synced(ws, pycrdt.Doc())
        await ws.send_bytes(create_update_message(update))
        return await refusal(ws)


@pytest.mark.live
@DB
def test_1000_nested_y_maps_in_one_update_are_refused_with_4400_and_nothing_is_stored(
    capped_server,
):
    """They reached render's recursion limit: a RecursionError, the socket dead
    without an answer."""
    _, url = capped_server
    key = a_key()
    shard_create(actor=Actor("t"), shard_id="deep", shard_type="additive", crdt_type="map")
    before = stored("deep")
    client = pycrdt.Doc()
    node = client.get("value", type=pycrdt.Map)
    with client.transaction():
        for _ in range(1000):
            node = _nest(node)

    error, code = asyncio.run(_send_and_refusal(url, key, "deep", client.get_update()))
    assert (error["code"], error["max_depth"], code) == ("VALIDATION_ERROR", 64, 4400)
    assert stored("deep") == before


@pytest.mark.live
@DB
def test_a_deep_nest_deleted_in_the_same_update_is_refused_and_the_server_lives(capped_server):
    """60,000 nested Y.Maps and a deletion of the outermost, 520 KB: yrs deletes
    recursively, and the server died with a segmentation fault."""
    _, url = capped_server
    key = a_key()
    shard_create(actor=Actor("t"), shard_id="deep-gone", shard_type="additive", crdt_type="map")
    before = stored("deep-gone")
    client = pycrdt.Doc(client_id=5)
    node = client.get("value", type=pycrdt.Map)
    with client.transaction():
        for _ in range(60_000):
            node = _nest(node)
    update = pycrdt.merge_updates(client.get_update(), bytes([0, 1, 5, 1, 0, 1]))  # delete (5, 0)

    error, code = asyncio.run(_send_and_refusal(url, key, "deep-gone", update))
    assert (error["code"], code) == ("VALIDATION_ERROR", 4400)
    assert httpx.get(f"{url}/api/health", timeout=WAIT).status_code == 200
    assert stored("deep-gone") == before


@pytest.mark.live
@DB
def test_nesting_grown_one_level_per_update_is_refused_at_the_limit(capped_server):
    """Each update names the type it nests in by id only: the value as a whole
    is measured once each update is in."""
    _, url = capped_server
    key = a_key()
    shard_create(actor=Actor("t"), shard_id="grown", shard_type="additive", crdt_type="array")

    async def scenario() -> tuple[dict, int]:
        async with aconnect_ws(ws_url(url, "grown"), headers=headers(key)) as ws:
            doc = pycrdt.Doc()
            node = doc.get("value", type=pycrdt.Array)
            await synced(ws, doc)
            for _ in range(63):  # 64 levels with the root

                def deeper(_doc: pycrdt.Doc) -> None:
                    nonlocal node
                    node = _nest(node)

                await edit_and_send(ws, doc, deeper)
            for _ in range(WAIT * 20):
                if (await asyncio.to_thread(stored, "grown"))[0] == 64:
                    break
                await asyncio.sleep(0.05)
            assert (await asyncio.to_thread(stored, "grown"))[0] == 64  # a version each
            await edit_and_send(ws, doc, lambda _: _nest(node))
            return await refusal(ws)

    error, code = asyncio.run(scenario())
    assert (error["code"], error["max_depth"], code) == ("VALIDATION_ERROR", 64, 4400)
    assert stored("grown")[0] == 64


@pytest.mark.live
@DB
@pytest.mark.parametrize(
    ("crdt_type", "edit"),
    [
        ("map", lambda root: root.__setitem__("note", "before\x00after")),
        ("map", lambda root: root.__setitem__("key\x00", 1)),
        ("text", lambda root: root.insert(0, "te\x00xt")),
    ],
    ids=["map-value", "map-key", "text"],
)
def test_a_nul_written_over_yjs_is_refused_with_4400_and_nothing_is_stored(
    capped_server, crdt_type, edit
):
    """PostgreSQL's jsonb refuses NUL: stored, it failed every later compaction."""
    _, url = capped_server
    key = a_key()
    shard_id = f"nul-{crdt_type}-{abs(hash(edit))}"
    shard_create(actor=Actor("t"), shard_id=shard_id, shard_type="additive", crdt_type=crdt_type)
    before = stored(shard_id)
    client = pycrdt.Doc()
    edit(client.get("value", type=pycrdt.Map if crdt_type == "map" else pycrdt.Text))

    error, code = asyncio.run(_send_and_refusal(url, key, shard_id, client.get_update()))
    assert (error["code"], code) == ("VALIDATION_ERROR", 4400)
    assert "NUL" in error["message"]
    assert stored(shard_id) == before
