"""Bad input on /ws/agents/ gets an error frame and the socket stays open: a
frame that was not JSON used to end the socket with 1011 (a server error)."""

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
