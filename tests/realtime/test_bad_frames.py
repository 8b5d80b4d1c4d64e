"""Bad input on /ws/agents/ gets an error frame and the socket stays open: a
frame that was not JSON used to end the socket with 1011 (a server error)."""

import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from access.services import api_key_create
from realtime.consumers import AgentConsumer


@pytest.mark.django_db(transaction=True)
async def test_frames_that_are_not_json_get_an_error_and_the_socket_keeps_working():
    _, raw = await sync_to_async(api_key_create)(name="ws", permissions=["shard:read"])
    agent = WebsocketCommunicator(
        AgentConsumer.as_asgi(), "/ws/agents/", headers=[(b"x-api-key", raw.encode())]
    )
    assert (await agent.connect())[0]
    for frame in ("not json", "{", "[" * 100_000, "null"):
        await agent.send_to(text_data=frame)
        error = await agent.receive_json_from(timeout=5)
        assert (error["type"], error["code"]) == ("error", "VALIDATION_ERROR")
    await agent.send_to(bytes_data=b"\x00\x01")
    assert (await agent.receive_json_from(timeout=5))["code"] == "VALIDATION_ERROR"
    await agent.send_json_to({"type": "ping"})
    assert await agent.receive_json_from(timeout=5) == {"type": "pong"}
    await agent.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_frame_over_the_body_limit_is_refused_unparsed_and_the_socket_keeps_working(
    settings,
):
    settings.ZEROLOCK_MAX_BODY_BYTES = 1000
    _, raw = await sync_to_async(api_key_create)(name="ws", permissions=["shard:read"])
    agent = WebsocketCommunicator(
        AgentConsumer.as_asgi(), "/ws/agents/", headers=[(b"x-api-key", raw.encode())]
    )
    assert (await agent.connect())[0]
    ids = [f"s{n}" for n in range(200)]  # a valid subscribe, 1.4 KB of JSON
    # 400 characters, 1,200 bytes: the limit counts bytes.
    for frame in (json.dumps({"type": "subscribe", "shard_ids": ids}), '"' + "€" * 400 + '"'):
        await agent.send_to(text_data=frame)
        error = await agent.receive_json_from(timeout=5)
        assert (error["type"], error["code"], error["limit_bytes"]) == (
            "error",
            "PAYLOAD_TOO_LARGE",
            1000,
        )
    await agent.send_json_to({"type": "subscribe", "shard_ids": ids[:10]})
    assert (await agent.receive_json_from(timeout=5))["type"] == "subscribed"
    await agent.disconnect()
