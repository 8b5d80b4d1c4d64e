"""The key watcher decides only for the keys its query asked about."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from access.services import api_key_create, api_key_revoke
from realtime import keywatch


class Socket:
    """What the watcher sees of a connection: it can be closed or re-checked."""

    def __init__(self) -> None:
        self.closed: int | bool | None = None

    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None:
        self.closed = code

    async def key_changed(self, key) -> None:
        pass


@pytest.mark.django_db(transaction=True)
async def test_a_key_registered_while_a_poll_is_in_flight_is_not_taken_for_revoked(
    monkeypatch,
):
    early, _ = await sync_to_async(api_key_create)(name="early", permissions=["shard:read"])
    late, _ = await sync_to_async(api_key_create)(name="late", permissions=["shard:read"])
    gone, _ = await sync_to_async(api_key_create)(name="gone", permissions=["shard:read"])
    in_flight, answer = asyncio.Event(), asyncio.Event()
    asked = keywatch._usable_keys

    async def held_query(prefixes):
        keys = await asked(prefixes)
        in_flight.set()
        await answer.wait()  # the answer is held while the late key registers
        return keys

    monkeypatch.setattr(keywatch, "POLL_SECONDS", 0.05)
    monkeypatch.setattr(keywatch, "_usable_keys", held_query)
    watch = keywatch.KeyWatch()
    first, second, revoked = Socket(), Socket(), Socket()
    watch.register(early, first)
    watch.register(gone, revoked)
    await in_flight.wait()
    watch.register(late, second)
    await sync_to_async(api_key_revoke)(key=gone, revoked_by="admin")
    answer.set()
    # Until the watcher has acted on the revocation (a few polls; far more under
    # CI's load, where a fixed half second once was not enough), then a few more.
    for _ in range(200):
        if revoked.closed is not None:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    try:
        assert (first.closed, second.closed) == (None, None)
        assert revoked.closed == keywatch.CLOSE_CODE_KEY_INVALID  # the watcher still works
    finally:
        watch.unregister(early.prefix, first)
        watch.unregister(late.prefix, second)
        await asyncio.sleep(0.1)
