"""Agent sessions and presence: which agents are connected, across every server
process, and what they hold.

Each agent socket (/ws/agents/ opened with an agent id) is a row: opened when the
socket is accepted, deleted when it closes. Its process renews ``last_seen`` for
all of its open rows every ZEROLOCK_SESSION_HEARTBEAT_SECONDS (one UPDATE), so a
process killed without closing them loses them after
ZEROLOCK_SESSION_TIMEOUT_SECONDS (``AgentSession.objects.live``)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from access.models import ApiKey
from common.inputs import iso_time
from common.prefixes import scope_within

from .leases import session_leases_release, session_leases_renew
from .models import AgentSession, Lease


def process_name() -> str:
    """This server process, as a session names it."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}"


def session_open(*, key_prefix: str, agent_id: str) -> int:
    return AgentSession.objects.create(
        key_prefix=key_prefix, agent_id=agent_id, process=process_name()
    ).pk


def session_close(session_id: int) -> int:
    """The socket closed: its row goes, and its agent's session leases start their
    grace period now (other sockets of the agent, if any, go on renewing them).
    Answers the longest grace started, in seconds (``session_leases_release``)."""
    agents = list(AgentSession.objects.filter(pk=session_id).values_list("key_prefix", "agent_id"))
    AgentSession.objects.filter(pk=session_id).delete()
    return session_leases_release(agents)


def sessions_seen(session_ids: Iterable[int]) -> None:
    """Renews this process's open sessions and their agents' session leases, and
    drops every process's dead sessions."""
    ids = list(session_ids)
    if ids:
        sessions = AgentSession.objects.filter(pk__in=ids)
        sessions.update(last_seen=timezone.now())
        session_leases_renew(sessions.values_list("key_prefix", "agent_id").distinct())
    AgentSession.objects.stale().delete()


def agents_live(*, within: list[str] | None = None) -> list[dict[str, Any]]:
    """Every connected agent, by key and agent id: its sockets, since when, when
    last seen, and the live leases it holds under that key.

    ``within``: the caller's key scopes. A scoped key sees only the agents whose
    keys are confined to its scopes (``scope_within``): a team's key learns
    nothing of other teams' agents, or of unscoped ones, which may touch anything."""
    rows = list(AgentSession.objects.live().order_by("agent_id", "key_prefix", "connected_since"))
    keys = {
        key.prefix: key
        for key in ApiKey.objects.filter(prefix__in={row.key_prefix for row in rows}).only(
            "prefix", "name", "shard_prefixes"
        )
    }
    if within:
        rows = [
            row
            for row in rows
            if row.key_prefix in keys and scope_within(keys[row.key_prefix].shard_prefixes, within)
        ]
    prefixes = {row.key_prefix for row in rows}
    names = {prefix: keys[prefix].name for prefix in prefixes if prefix in keys}
    leases: dict[tuple[str, str], list[dict[str, Any]]] = {}
    holders = {row.agent_id for row in rows}
    live = Lease.objects.live().filter(holder__in=holders, key_prefix__in=prefixes).order_by("id")
    for lease in live:
        leases.setdefault((lease.key_prefix, lease.holder), []).append(
            {
                "lease_id": lease.id,
                "ttl_seconds": lease.ttl_seconds,
                "expires_at": iso_time(lease.expires_at),
                "fence": lease.fence,
                "session": lease.session,
            }
        )
    agents: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        entry = agents.get((row.key_prefix, row.agent_id))
        if entry is None:
            entry = agents[(row.key_prefix, row.agent_id)] = {
                "agent_id": row.agent_id,
                "key": {"name": names.get(row.key_prefix, ""), "prefix": row.key_prefix},
                "connected_since": row.connected_since,
                "last_seen": row.last_seen,
                "sockets": 0,
                "leases": leases.get((row.key_prefix, row.agent_id), []),
            }
        entry["sockets"] += 1
        entry["connected_since"] = min(entry["connected_since"], row.connected_since)
        entry["last_seen"] = max(entry["last_seen"], row.last_seen)
    return [
        entry
        | {
            "connected_since": iso_time(entry["connected_since"]),
            "last_seen": iso_time(entry["last_seen"]),
        }
        for entry in agents.values()
    ]
