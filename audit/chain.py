"""The hash-chained audit log: appending inside a write transaction, verifying."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from audit.models import AuditEntry, AuditHead
from common import hotsql
from common.applied import applied_mark
from common.db import sqlite_writer_queue

GENESIS_HASH = "0" * 64
_NO_VALUE = object()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def value_digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def entry_digest(entry: AuditEntry) -> str:
    """SHA-256 over every field of the entry except its id, plus the previous hash."""
    body = {
        "prev_hash": entry.prev_hash,
        # Not common.inputs.iso_time: this text is hashed into every stored entry,
        # so "+00:00" it stays (a "Z" would break the chain of entries written so far).
        "created_at": entry.created_at.isoformat(),
        "action": entry.action,
        "agent_id": entry.agent_id,
        "key_prefix": entry.key_prefix,
        "shard_id": entry.shard_id,
        "version_before": entry.version_before,
        "version_after": entry.version_after,
        "value_hash": entry.value_hash,
        "details": entry.details,
    }
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


@dataclass
class AuditWriter:
    """Appends entries to the chain inside one audited transaction. What a
    version-writing transaction knows besides (its sweeps, what it wrote) is the
    shards app's own: ``shards.writetx.WriteTx``."""

    head: AuditHead

    def append(
        self,
        *,
        action: str,
        agent_id: str = "",
        key_prefix: str = "",
        shard_id: str = "",
        version_before: int | None = None,
        version_after: int | None = None,
        value: Any = _NO_VALUE,
        details: dict[str, Any] | None = None,
    ) -> AuditEntry:
        has_value = value is not _NO_VALUE
        entry = AuditEntry(
            created_at=timezone.now(),
            action=action,
            agent_id=agent_id,
            key_prefix=key_prefix,
            shard_id=shard_id,
            version_before=version_before,
            version_after=version_after,
            value=value if has_value else None,
            value_hash=value_digest(value) if has_value else "",
            details=details or {},
            prev_hash=self.head.last_hash,
        )
        entry.entry_hash = entry_digest(entry)
        hotsql.insert_instance(entry)
        # The head row is written once, when the transaction is done with it
        # (audited_transaction), not once per entry: a batch of writes moves it once.
        self.head.last_hash = entry.entry_hash
        return entry


@contextmanager
def audited_transaction() -> Iterator[AuditWriter]:
    """Every write runs in here. Locking the audit head first puts all writers in one
    queue (on PostgreSQL; SQLite's IMMEDIATE transactions already do), so the chain
    never forks and read-set checks see no concurrent change.

    The head row is written once, as the outermost audited transaction ends, so
    one opened inside it (a savepoint) continues the same head in memory rather
    than reading the row, which does not show the newest entries yet."""
    outer: AuditWriter | None = getattr(connection, "zerolock_audit", None)
    if outer is not None:
        with transaction.atomic():
            restore = outer.head.last_hash
            try:
                yield AuditWriter(outer.head)
            except BaseException:
                outer.head.last_hash = restore  # its entries are rolled back
                raise
        return
    with sqlite_writer_queue(), transaction.atomic():
        row = hotsql.select_one(AuditHead, ("last_hash",), for_update=True, id=1)
        if row is None:
            AuditHead.objects.get_or_create(pk=1, defaults={"last_hash": GENESIS_HASH})
            row = hotsql.select_one(AuditHead, ("last_hash",), for_update=True, id=1)
            assert row is not None
        head = AuditHead(pk=1, last_hash=row["last_hash"])
        locked_hash = head.last_hash
        writer = AuditWriter(head)
        connection.zerolock_audit = writer  # type: ignore[attr-defined]
        try:
            yield writer
        finally:
            connection.zerolock_audit = None  # type: ignore[attr-defined]
        # Still inside the transaction: the chain's new end is stored with it, and
        # the request's Idempotency-Key is marked applied by the same commit.
        applied_mark()
        if writer.head.last_hash != locked_hash:
            hotsql.update_where(AuditHead, {"last_hash": writer.head.last_hash}, id=1)


@dataclass
class ChainBreak:
    entry_id: int
    reason: str


def verify_chain(batch_size: int = 2000) -> tuple[int, ChainBreak | None]:
    """Walks the log in order; returns (entries checked, first break or None)."""
    previous = GENESIS_HASH
    checked = 0
    last_id = 0
    while True:
        batch = list(AuditEntry.objects.filter(id__gt=last_id).order_by("id")[:batch_size])
        if not batch:
            break
        for entry in batch:
            if entry.prev_hash != previous:
                return checked, ChainBreak(entry.pk, "prev_hash does not match the entry before it")
            if entry.value_hash and entry.value_hash != value_digest(entry.value):
                return checked, ChainBreak(entry.pk, "stored value does not match value_hash")
            if entry.entry_hash != entry_digest(entry):
                return checked, ChainBreak(entry.pk, "entry contents do not match entry_hash")
            previous = entry.entry_hash
            checked += 1
        last_id = batch[-1].pk
    head = AuditHead.objects.filter(pk=1).first()
    if head is not None and checked and head.last_hash != previous:
        return checked, ChainBreak(last_id, "the newest entries were removed (head hash differs)")
    return checked, None
