"""Every consumer skips channels' per-message close_old_connections
(realtime.consumers.LeanDispatch), and the skip still has something to skip."""

from __future__ import annotations

import inspect

from channels.consumer import AsyncConsumer

from realtime.consumers import AgentConsumer, LeanDispatch, LiveConsumer
from realtime.yjs import ShardYjsConsumer


def test_channels_still_closes_old_connections_before_every_message_by_default():
    # If this fails, channels stopped doing it: LeanDispatch can go.
    assert "aclose_old_connections()" in inspect.getsource(AsyncConsumer.dispatch)


def test_every_consumer_dispatches_without_the_thread_hop():
    for consumer in (AgentConsumer, LiveConsumer, ShardYjsConsumer):
        assert consumer.dispatch is LeanDispatch.dispatch, consumer
