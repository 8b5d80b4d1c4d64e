"""Yjs sync for additive shards, /ws/crdt/{shard_id} (docs/api.md).

pycrdt-websocket's Channels consumer speaks the protocol; this subclass adds
what a shared server needs: the API key, the shard's rules, and the database as
the only copy of the document. The consumer keeps no Doc of its own: sync
step 1 is answered from the stored state, every update a client sends goes
through ``additive_update_apply`` (persisted, versioned, audited, pushed to the
shard's other clients), and REST commits arrive as ``crdt.update`` messages.

A refusal is a JSON error frame (the API's envelope) followed by a close code,
because not every server passes close reasons on (Daphne drops them): 4400 bad
input or not an additive shard, 4401 bad key, 4403 not allowed, 4404 no such shard (also when the shard is
deleted while the socket is open), 4413 a message over the body limit or a shard
at its size cap, 4429 too many failed handshakes. An update that reaches past the
shard's root ``value`` is refused before it touches the Doc (shards/crdt_update.py).

The socket is bound to the shard's incarnation (``Shard.incarnation``), not its
id: its writes are refused once the shard is deleted, even if a shard with the
same id has been created since. The key is read again before each update is
applied, so a key that lost ``shard:write`` (or its scope, or the agent) writes
nothing more; keywatch closes the socket when the key no longer lets it read.
"""

from __future__ import annotations

import json
from typing import Any

from channels.db import database_sync_to_async
from pycrdt import (
    Decoder,
    Doc,
    YMessageType,
    YSyncMessageType,
    create_update_message,
    handle_sync_message,
)
from pycrdt.websocket.django_channels_consumer import YjsConsumer, _WebsocketShim

from access.auth import agent_required, key_current, permission_check, reads_check
from access.handshakes import handshake_key
from access.identity import Actor
from access.models import ApiKey
from common.errors import ApiError, ErrorCode, MalformedUpdate, ShardNotFound
from realtime import push
from realtime.consumers import LeanDispatch, agent_id_of, message_size_check, raw_key_of
from realtime.keywatch import key_watch
from shards import crdt, crdt_store
from shards.models import Shard, ShardType
from shards.selectors import shard_get
from shards.services import additive_update_apply

CLOSE_CODES = {400: 4400, 401: 4401, 403: 4403, 404: 4404, 413: 4413, 429: 4429}


def yjs_open(
    *, scope: dict[str, Any], raw_key: str, agent_id: str, shard_id: str
) -> tuple[Any, Shard, Doc]:
    """Who is connecting and to what, or ApiError; plus the Doc as stored now."""
    key = handshake_key(scope=scope, raw_key=raw_key)
    # What a /ws/crdt/ socket needs to open and to stay open: the agent, read, the scope.
    reads_check(key, agent_id=agent_id, shard_ids=[shard_id])
    shard = shard_get(shard_id, payload=False)
    if shard.type != ShardType.ADDITIVE:
        raise ApiError(
            ErrorCode.NOT_ADDITIVE,
            f"Shard {shard_id!r} is a {shard.type} shard: only additive shards sync over "
            "/ws/crdt/; commit to it with POST /api/shards/{id}/commit.",
            shard_id=shard_id,
        )
    return key, shard, stored_doc(shard)


def yjs_write_check(key_prefix: str, agent_id: str, shard_id: str) -> ApiKey:
    """Before each update: the key as it is NOW (not as it was at connect), and
    what the socket needs to stay open (``reads_check``) and to write."""
    key = key_current(key_prefix)
    reads_check(key, agent_id=agent_id, shard_ids=[shard_id])
    permission_check(key, "shard:write")
    agent_required(agent_id)
    return key


def stored_doc(shard: Shard) -> Doc:
    """The shard's Doc as stored now, a private copy (cached Docs are shared)."""
    try:
        loaded = crdt_store.read(shard.pk, shard.crdt_kind)
    except Shard.DoesNotExist:
        loaded = None
    if loaded is None or loaded.incarnation != shard.incarnation:
        raise ShardNotFound(shard.pk)
    return loaded.doc


class ShardYjsConsumer(LeanDispatch, push.BatchedPushes, YjsConsumer):
    key = None
    shard: Shard | None = None
    agent_id = ""

    def make_room_name(self) -> str:
        return push.group_name("crdt", self.scope["url_route"]["kwargs"]["shard_id"])

    async def make_ydoc(self) -> Doc:
        return self._opened_doc

    def _make_websocket_shim(self, path: str) -> _WebsocketShim:
        # The stock consumer sends its sync step 1 to the whole room; ours goes to
        # this client only.
        return _WebsocketShim(path, self._send_bytes)

    async def _send_bytes(self, message: bytes) -> None:
        await self.send(bytes_data=message)

    async def connect(self) -> None:
        push.bind_loop()
        self.agent_id = agent_id_of(self.scope)
        try:
            self.key, self.shard, self._opened_doc = await database_sync_to_async(yjs_open)(
                scope=self.scope,
                raw_key=raw_key_of(self.scope),
                agent_id=self.agent_id,
                shard_id=self.scope["url_route"]["kwargs"]["shard_id"],
            )
        except ApiError as refusal:
            await self.accept()
            await self.refuse(refusal)
            return
        key_watch.register(self.key, self)
        await super().connect()
        self._opened_doc = None

    async def disconnect(self, code: int) -> None:
        if self.key is not None:
            key_watch.unregister(self.key.prefix, self)
        if self.room_name is not None:
            await super().disconnect(code)

    async def key_changed(self, key: ApiKey) -> None:
        """keywatch: the key's grants changed. Writes re-check the key anyway;
        a key that may no longer read this shard closes the socket."""
        assert self.shard is not None
        try:
            reads_check(key, agent_id=self.agent_id, shard_ids=[self.shard.pk])
        except ApiError as refusal:
            await self.refuse(refusal)
            return
        self.key = key

    async def crdt_deleted(self, event: dict[str, Any]) -> None:
        """The shard was deleted: this socket's state belongs to a shard that is gone."""
        await self.refuse(ShardNotFound(event["shard_id"], deleted=True))

    async def refuse(self, error: ApiError) -> None:
        await self.send(text_data=json.dumps(error.envelope()))
        await self.close(code=CLOSE_CODES.get(error.status, 4400))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.shard is None:
            return
        try:
            await self._receive(text_data, bytes_data)
        except ApiError as error:
            await self.refuse(error)

    async def _receive(self, text: str | None, message: bytes | None) -> None:
        message_size_check(text, message)
        if not message:
            raise MalformedUpdate("/ws/crdt/ takes binary Yjs messages.")
        if message[0] == YMessageType.AWARENESS:
            # Presence (cursors, names): relayed, never stored.
            await self.channel_layer.group_send(
                self.room_name,
                {"type": "crdt.relay", "message": message, "origin": self.channel_name},
            )
            return
        if message[0] != YMessageType.SYNC or len(message) < 2:
            raise MalformedUpdate(f"Unknown Yjs message type {message[0]}.")
        if message[1] == YSyncMessageType.SYNC_STEP1:
            doc = await database_sync_to_async(stored_doc)(self.shard)
            try:
                reply = handle_sync_message(message[1:], doc)
            except (ValueError, RuntimeError, IndexError) as exc:
                raise MalformedUpdate(f"Bad sync step 1: {exc}") from exc
            if reply is not None:
                await self.send(bytes_data=reply)
            return
        if message[1] not in (YSyncMessageType.SYNC_STEP2, YSyncMessageType.SYNC_UPDATE):
            raise MalformedUpdate(f"Unknown sync message type {message[1]}.")
        try:
            update = Decoder(message[2:]).read_message()
        except (ValueError, RuntimeError, IndexError) as exc:
            raise MalformedUpdate(f"Cannot read the update: {exc}") from exc
        if update is None:
            raise MalformedUpdate("The update message is truncated.")
        await database_sync_to_async(self._apply)(update)

    def _apply(self, update: bytes) -> None:
        if crdt.is_empty_update(update):
            return
        assert self.key is not None and self.shard is not None
        self.key = yjs_write_check(self.key.prefix, self.agent_id, self.shard.pk)
        additive_update_apply(
            actor=Actor(agent_id=self.agent_id, key_prefix=self.key.prefix),
            shard=self.shard,
            update=update,
            origin=self.channel_name,
        )

    async def crdt_update(self, event: dict[str, Any]) -> None:
        if event.get("origin") != self.channel_name:
            await self.send(bytes_data=create_update_message(event["update"]))

    async def crdt_relay(self, event: dict[str, Any]) -> None:
        if event.get("origin") != self.channel_name:
            await self.send(bytes_data=event["message"])
