"""Audit records of commits refused as stale before they reached the write lock.

Under contention most commits are doomed: their expected version is already
gone. Taking the global write lock only to record that made every refusal as
costly as a commit, and 50 agents retrying spent the lock on refusals (the
lost-update test went from ~50 s to several minutes on PostgreSQL). Such a
refusal is now decided by a plain read, and its audit record is appended in
batches by one thread per process (every 0.2 s; flushed at exit). A hard kill
can lose the last fraction of a second of these records, never a commit.

One bad record must not take its batch with it: a stale commit carrying
``expected_version = 2**63`` once overflowed the batched insert and the whole
batch of honest refusals was dropped. So each record is made storable before it
is queued (``rejection_entry``), and a batch that still fails is written again
row by row; a row that fails alone is logged (no values) and counted.

Authentication failures (REST and WebSocket handshakes) take the same path
(``append``): each used to take the global write lock on its own, and a flood of
300 failed handshakes a second slowed honest commits four-fold."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from audit.chain import audited_transaction
from audit.models import AuditAction, AuditEntry
from common.inputs import is_json_integer
from common.writebehind import WriteBehind
from metrics import record

logger = logging.getLogger(__name__)
FLUSH_SECONDS = 0.2
# The audit columns are 64-bit on every backend (SQLite INTEGER, PostgreSQL bigint).
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
DROPPED_COUNTER = "audit_rejections_dropped"


def storable_text(value: object, max_length: int) -> str:
    """Text any backend stores: no NUL (PostgreSQL refuses it), no lone
    surrogate (not UTF-8), within the column's length."""
    text = value if isinstance(value, str) else str(value)
    text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    return text[:max_length]


def _column_text(value: object, field: str) -> str:
    column = AuditEntry._meta.get_field(field)
    return storable_text(value, getattr(column, "max_length", None) or 0)


def rejection_entry(
    *, agent_id: str, key_prefix: str, shard_id: str, expected: object, code: str
) -> dict[str, Any]:
    """The audit record of one refused commit, checked so that it can always be
    written: an expected version outside 64 bits is kept as a flag, not a number."""
    in_range = is_json_integer(expected) and BIGINT_MIN <= expected <= BIGINT_MAX
    details: dict[str, Any] = {"code": storable_text(code, 64)}
    if not in_range:
        details["expected_version_out_of_range"] = True
    return {
        "action": AuditAction.SHARD_COMMIT_REJECTED,
        "agent_id": _column_text(agent_id, "agent_id"),
        "key_prefix": _column_text(key_prefix, "key_prefix"),
        "shard_id": _column_text(shard_id, "shard_id"),
        "version_before": expected if in_range else None,
        "details": details,
    }


MAX_BATCH = 1000


class RejectionRecorder:
    def __init__(self) -> None:
        self.dropped = 0  # records that could not be written, in this process
        self._writer: WriteBehind[dict[str, Any]] = WriteBehind(
            "rejection-audit",
            self.write_batch,
            period=FLUSH_SECONDS,
            max_batch=MAX_BATCH,
            enabled=lambda: settings.ZEROLOCK_REJECTION_WRITE_BEHIND,
        )

    def record(
        self, *, agent_id: str, key_prefix: str, shard_id: str, expected: int, code: str
    ) -> None:
        entry = rejection_entry(
            agent_id=agent_id,
            key_prefix=key_prefix,
            shard_id=shard_id,
            expected=expected,
            code=code,
        )
        self.append(entry)

    def append(self, entry: dict[str, Any]) -> None:
        """Any audit entry (``AuditWriter.append``'s arguments) written behind, in batches."""
        self._writer.put(entry)

    def flush(self) -> None:
        self._writer.flush()

    @staticmethod
    def _write(entries: list[dict[str, Any]]) -> None:
        with audited_transaction() as audit:
            for entry in entries:
                audit.append(**entry)

    def write_batch(self, entries: list[dict[str, Any]]) -> int:
        """Writes the batch in one transaction, or else row by row so that one row
        that cannot be stored loses only itself. Returns how many were written."""
        try:
            self._write(entries)
            return len(entries)
        except Exception as exc:
            if len(entries) == 1:
                self._dropped(entries[0], exc)
                return 0
            logger.warning(
                "A batch of %d refused-commit audit records failed (%s); writing them one by one",
                len(entries),
                type(exc).__name__,
            )
        written = 0
        for entry in entries:
            try:
                self._write([entry])
                written += 1
            except Exception as exc:
                self._dropped(entry, exc)
        return written

    def _dropped(self, entry: dict[str, Any], exc: Exception) -> None:
        # Names and the error's type only: no values, no key material.
        self.dropped += 1
        logger.error(
            "Dropped the audit record of a refused commit (shard %r, agent %r, code %r): %s",
            str(entry.get("shard_id", ""))[:128],
            str(entry.get("agent_id", ""))[:128],
            (entry.get("details") or {}).get("code"),
            type(exc).__name__,
        )
        try:
            record.recorder.count(DROPPED_COUNTER)
        except Exception:  # counting must not take the writer down either
            logger.exception("Could not count a dropped audit record")


rejections = RejectionRecorder()
