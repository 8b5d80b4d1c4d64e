"""How the shards core reaches the layers above it without importing them.

The core never imports ``approvals`` or ``coordination``. Those apps fill this
registry in their ``AppConfig.ready()`` (the way healthchecks' ``TRANSPORTS``
knows its integrations):

- ``gate``: the approval gate. With none registered, an irreversible shard
  refuses every commit (fail closed).
- ``write_sweeps``: expiry that must run before any version is written, inside
  the same write transaction (lease expiry: what an expired lease held is gone
  before anything is based on it).
- ``tick_sweeps``: expiry run on a timer by the server processes that hold
  sockets (approval expiry), besides Celery beat.
- ``delete_hooks``: state bound to a shard that ends with it, in the delete's
  transaction (a lease's bindings, open approvals).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from audit.chain import AuditWriter
from common.applied import applied_marking

from .writetx import WriteTx


class Gate(Protocol):
    """The approval half of the irreversibility rule."""

    def verify(
        self,
        *,
        approval_id: str,
        shard_id: str,
        agent_id: str,
        expected_version: int,
        new_value: Any,
    ) -> None:
        """Raises ApiError unless this commit may carry this approval."""

    def consume(self, *, approval_id: str, commit: dict[str, Any]) -> None:
        """Marks the approval used by ``commit``, inside the commit's transaction."""


WriteSweep = Callable[[WriteTx], int]
DueCheck = Callable[[], bool]
TickSweep = Callable[[], int]
DeleteHook = Callable[[AuditWriter, str], None]


@dataclass
class Hooks:
    gate: Gate | None = None
    write_sweeps: dict[str, WriteSweep] = field(default_factory=dict)
    # For each write sweep, a cheap lock-free "anything due?" (reads use it).
    write_sweeps_due: dict[str, DueCheck] = field(default_factory=dict)
    tick_sweeps: dict[str, TickSweep] = field(default_factory=dict)
    delete_hooks: dict[str, DeleteHook] = field(default_factory=dict)


hooks = Hooks()


def gate_register(gate: Gate) -> None:
    hooks.gate = gate


def write_sweep_register(name: str, sweep: WriteSweep, *, due: DueCheck) -> None:
    hooks.write_sweeps[name] = sweep
    hooks.write_sweeps_due[name] = due


def tick_sweep_register(name: str, sweep: TickSweep) -> None:
    hooks.tick_sweeps[name] = sweep


def delete_hook_register(name: str, hook: DeleteHook) -> None:
    hooks.delete_hooks[name] = hook


def tick_sweeps_run() -> int:
    """Every registered timed sweep once; what each one ended, added up. Never
    the write of whatever request's context started the sweeper."""
    with applied_marking(None):
        return sum(sweep() for sweep in list(hooks.tick_sweeps.values()))
