"""The renewal rule alone (coordination.leases.session_leases_renew), in time."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from coordination.leases import lease_grant, session_leases_renew
from coordination.models import AgentSession, Lease
from coordination.sessions import session_close, sessions_seen

pytestmark = pytest.mark.django_db


def test_a_renewal_moves_only_live_session_leases_of_the_agents_renewed():
    with time_machine.travel("2026-12-02 08:00:00", tick=False) as clock:
        AgentSession.objects.create(key_prefix="zl_a", agent_id="alice", process="p1")
        AgentSession.objects.create(key_prefix="zl_b", agent_id="alice", process="p1")
        mine = lease_grant(holder="alice", key_prefix="zl_a", ttl_seconds=5, session=True)
        plain = lease_grant(holder="alice", key_prefix="zl_a", ttl_seconds=5)
        other_key = lease_grant(holder="alice", key_prefix="zl_b", ttl_seconds=5, session=True)
        ended = lease_grant(holder="alice", key_prefix="zl_a", ttl_seconds=5, session=True)
        Lease.objects.filter(pk=ended.pk).update(revoked=True)
        clock.shift(3)
        assert session_leases_renew([("zl_a", "alice")]) == 1
        at = {lease.pk: lease.expires_at for lease in Lease.objects.all()}
        assert at[mine.pk] == timezone.now() + timedelta(seconds=5)
        assert at[plain.pk] == at[other_key.pk] == at[ended.pk] == mine.expires_at


def test_a_session_lease_past_its_time_is_not_brought_back():
    with time_machine.travel("2026-12-02 08:00:00", tick=False) as clock:
        AgentSession.objects.create(key_prefix="zl_a", agent_id="alice", process="p1")
        lease = lease_grant(holder="alice", key_prefix="zl_a", ttl_seconds=2, session=True)
        clock.shift(2)
        assert session_leases_renew([("zl_a", "alice")]) == 0
        assert Lease.objects.get(pk=lease.pk).expires_at == lease.expires_at


def test_the_heartbeat_renews_and_a_closing_socket_starts_the_grace():
    with time_machine.travel("2026-12-02 08:00:00", tick=False) as clock:
        socket = AgentSession.objects.create(key_prefix="zl_a", agent_id="alice", process="p1")
        lease = lease_grant(holder="alice", key_prefix="zl_a", ttl_seconds=3, session=True)
        for _ in range(10):  # ten heartbeats, more than three times its ttl
            clock.shift(1)
            sessions_seen([socket.pk])
        assert Lease.objects.live().filter(pk=lease.pk).exists()
        clock.shift(0.5)
        session_close(socket.pk)
        closed = timezone.now()
        assert Lease.objects.get(pk=lease.pk).expires_at == closed + timedelta(seconds=3)
        clock.shift(3)
        assert not Lease.objects.live().filter(pk=lease.pk).exists()
