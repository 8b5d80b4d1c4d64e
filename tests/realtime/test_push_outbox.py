"""The push outbox (realtime.push.Outbox): pushes from many HTTP threads at once
reach their group exactly once and in each thread's order, however they were
batched, on the in-memory layer and on Redis."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from channels.layers import get_channel_layer

from realtime import push


def test_a_lone_message_goes_as_itself_and_more_go_as_one_batch_per_group():
    queued = [("a", {"n": 1}), ("b", {"n": 2}), ("a", {"n": 3})]
    assert push.batched(queued) == [
        ("a", [{"type": push.BATCH_TYPE, "messages": [{"n": 1}, {"n": 3}]}]),
        ("b", [{"n": 2}]),
    ]


def test_a_long_queue_is_cut_into_bounded_batches_in_order():
    queued = [("a", {"n": n}) for n in range(push.BATCH_MAX * 2 + 1)]
    [(group, sent)] = push.batched(queued)
    assert [len(m.get("messages", [m])) for m in sent] == [push.BATCH_MAX, push.BATCH_MAX, 1]
    unpacked = [x for m in sent for x in m.get("messages", [m])]
    assert unpacked == [m for _, m in queued]


def expand(message: dict[str, Any]) -> list[dict[str, Any]]:
    if message["type"] == push.BATCH_TYPE:
        return [x for m in message["messages"] for x in expand(m)]
    return [message]


async def test_eight_threads_pushing_at_once_lose_nothing_and_keep_their_order():
    push.bind_loop()
    layer = get_channel_layer()
    group = f"outbox-test-{id(asyncio.get_running_loop())}"
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    threads, each = 8, 250

    def producer(p: int) -> None:
        for n in range(each):
            push.group_send(group, {"type": "test.message", "producer": p, "n": n})

    workers = [threading.Thread(target=producer, args=(p,)) for p in range(threads)]
    for worker in workers:
        worker.start()
    received: list[dict[str, Any]] = []
    wire_messages = 0
    try:
        while len(received) < threads * each:
            message = await asyncio.wait_for(layer.receive(channel), timeout=10)
            wire_messages += 1
            received.extend(expand(message))
    finally:
        for worker in workers:
            worker.join()
        await layer.group_discard(group, channel)
    assert len(received) == threads * each  # none lost, none twice
    for p in range(threads):
        assert [m["n"] for m in received if m["producer"] == p] == list(range(each))
    assert wire_messages <= threads * each
    with pytest.raises(asyncio.TimeoutError):  # and nothing more arrives
        await asyncio.wait_for(layer.receive(channel), timeout=0.3)


def test_a_push_to_a_closed_loop_is_dropped_without_raising_into_the_caller():
    loop = asyncio.new_event_loop()
    box = push.Outbox(loop)
    loop.close()
    box.put("a", {"type": "test.message"})  # a service's after-commit hook must not fail
    box.put("a", {"type": "test.message"})
    assert not box._sending  # not left stuck "sending", which would swallow every later push
