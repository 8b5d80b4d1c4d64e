"""The state of one version-writing transaction (``writer.write_transaction``
and group commit's batches): what the version writer and the write sweeps
share, kept here rather than on the audit log's writer, which only chains."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from audit.chain import AuditWriter


@dataclass
class WriteTx:
    audit: AuditWriter  # the chain this transaction appends to
    started: float  # when it began (commit latency)
    sweep_counts: dict[str, int] = field(default_factory=dict)  # what each write sweep ended
    written: list[str] = field(default_factory=list)  # shard ids given a new version
    # Additive shards' Docs as this transaction's writes left them: a later write
    # in the same transaction (group commit) takes one instead of rebuilding it,
    # and what is left here is cached once the transaction commits.
    fresh_docs: dict[str, Any] = field(default_factory=dict)
    # Set by swept_transaction, which runs the write sweeps first (their own
    # version writes, a lease's end, come first): the version writer refuses a
    # WriteTx made any other way.
    swept: bool = False
