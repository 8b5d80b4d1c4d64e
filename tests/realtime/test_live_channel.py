"""/ws/live/ for the pages: session login, same-origin only, read-only, and a
storm of commits arrives coalesced."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.test import Client

from access.identity import Actor
from approvals.roles import groups_ensure
from realtime.consumers import LIVE_COALESCE_SECONDS
from shards.models import Shard
from shards.services import shard_commit, shard_create
from zerolock_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(username: str, group: str | None) -> bytes:
    groups_ensure()
    user = User.objects.create_user(username, password="pw-pw-pw-pw")
    if group:
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def live_socket(cookie: bytes | None, origin: bytes = b"http://127.0.0.1") -> WebsocketCommunicator:
    headers = [(b"origin", origin)]
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, "/ws/live/", headers=headers)


async def test_only_signed_in_watchers_from_this_site_may_open_it():
    viewer = await sync_to_async(session_cookie)("victor", "Viewers")
    outsider = await sync_to_async(session_cookie)("olga", None)
    assert not (await live_socket(None).connect())[0]
    assert not (await live_socket(outsider).connect())[0]
    assert not (await live_socket(viewer, origin=b"http://evil.example").connect())[0]
    allowed = live_socket(viewer)
    assert (await allowed.connect())[0]
    await allowed.disconnect()


def storm(n: int) -> None:
    shard = Shard.objects.get(pk="busy")
    for version in range(1, n + 1):
        shard_commit(
            actor=Actor("stormer"), shard=shard, expected_version=version, new_value=version
        )


async def test_a_storm_of_commits_reaches_the_page_in_a_few_coalesced_batches():
    await sync_to_async(shard_create)(
        actor=Actor("x"), shard_id="busy", shard_type="decision", initial_value=0
    )
    socket = live_socket(await sync_to_async(session_cookie)("victor", "Viewers"))
    assert (await socket.connect())[0]
    started = time.monotonic()
    await sync_to_async(storm)(200)
    batches = []
    while not await socket.receive_nothing(timeout=1):
        batches.append(await socket.receive_json_from())
    elapsed = time.monotonic() - started
    assert batches and all(b["type"] == "shards" for b in batches)
    # At most one batch per coalescing window, however long the storm took (the
    # count itself depends on the machine's speed), each batch naming the shard
    # once, the last one with the final version.
    assert len(batches) <= elapsed / LIVE_COALESCE_SECONDS + 1
    assert all(len(b["changes"]) == 1 for b in batches)
    assert batches[-1]["changes"][0]["version"] == 201
    await socket.disconnect()


def signed_in(username: str) -> tuple[Client, bytes]:
    groups_ensure()
    user = User.objects.create_user(username, password="pw-pw-pw-pw")
    user.groups.add(Group.objects.get(name="Viewers"))
    client = Client()
    client.force_login(user)
    return client, f"sessionid={client.cookies['sessionid'].value}".encode()


def logged_out(client: Client) -> None:
    client.post("/accounts/logout/")


def demoted(username: str) -> None:
    User.objects.get(username=username).groups.clear()


async def test_a_page_socket_closes_when_its_session_is_logged_out_or_its_user_demoted():
    from realtime.consumers import CLOSE_SIGNED_OUT, LIVE_SESSION_POLL_SECONDS

    vera, vera_cookie = await sync_to_async(signed_in)("vera")
    _, walt_cookie = await sync_to_async(signed_in)("walt")
    _, sam_cookie = await sync_to_async(signed_in)("sam")
    sockets = {name: live_socket(cookie) for name, cookie in
               (("vera", vera_cookie), ("walt", walt_cookie), ("sam", sam_cookie))}  # fmt: skip
    for socket in sockets.values():
        assert (await socket.connect())[0]
    await sync_to_async(logged_out)(vera)
    await sync_to_async(demoted)("walt")
    for name in ("vera", "walt"):
        closed = await sockets[name].receive_output(timeout=LIVE_SESSION_POLL_SECONDS * 4)
        assert closed == {"type": "websocket.close", "code": CLOSE_SIGNED_OUT}, name
    # Sam is still signed in and allowed: his socket stays open.
    assert await sockets["sam"].receive_nothing(timeout=LIVE_SESSION_POLL_SECONDS * 2)
    await sockets["sam"].disconnect()
