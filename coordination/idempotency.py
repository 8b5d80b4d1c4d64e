"""``Idempotency-Key`` on writes: a retry with the same key and the same request
gets the stored response instead of a second application.

The key is reserved before the view runs (a unique row, with a random holder
token), so two copies of one request racing each other apply once: the second
is told the first is still in progress (409 IDEMPOTENCY_IN_PROGRESS) and
retries. Responses are kept 24 hours per API key; 429, and 5xx that applied
nothing, are not kept, so those retries run again.

A crash between the write and storing its answer must not strand the key. So
the write marks the reservation applied inside its own transaction
(``common.applied``; the mark is fenced by the holder token), and a retry that
finds a reservation older than ZEROLOCK_IDEMPOTENCY_TAKEOVER_SECONDS:
- takes it over and runs, when nothing was applied. The copy it took it from,
  if still alive after all, can no longer apply: its mark finds another holder
  and its write rolls back (409 IDEMPOTENCY_IN_PROGRESS);
- gets 409 IDEMPOTENCY_ANSWER_LOST, stored as the key's answer, when the write
  applied but its answer was never stored: the change is in, read it back.

A record belongs to the API key and the agent id (X-Agent-Id) together: two
agents sharing a key each have their own. Only a request that will
authenticate reserves or replays one, so a bad, revoked or expired key, or an
agent its key may not act as, gets DRF's refusal and leaves nothing behind."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from access.auth import request_principal
from access.identity import Principal
from common import hotsql
from common.applied import applied_marking
from common.db import sqlite_writer_queue
from common.errors import ApiError, ErrorCode, envelope
from common.paths import is_api_path
from coordination.models import IdempotencyRecord

TTL = timedelta(hours=24)
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
MAX_KEY = 255


def _error(code: ErrorCode, message: str) -> JsonResponse:
    return JsonResponse(envelope(code, message), status=code.status)


def record_scope(who: Principal) -> str:
    """Whose record it is: the key (by its unique prefix) and the agent it acts as."""
    return hashlib.sha256(f"{who.key.prefix}\n{who.agent_id}".encode()).hexdigest()


def idempotency_prune() -> int:
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=timezone.now() - TTL).delete()
    return deleted


def takeover_after() -> timedelta:
    return timedelta(seconds=settings.ZEROLOCK_IDEMPOTENCY_TAKEOVER_SECONDS)


def applied_fence(record_id: int, holder: str) -> Callable[[], None]:
    """The mark the request's writes leave (``common.applied``): the reservation
    is applied, by this holder only. A reservation a retry took over refuses it,
    and the write that asked rolls back rather than apply a second time."""

    def mark() -> None:
        if not hotsql.update_where(
            IdempotencyRecord, {"applied": True}, id=record_id, holder=holder
        ):
            raise ApiError(
                ErrorCode.IDEMPOTENCY_IN_PROGRESS,
                "A retry with this Idempotency-Key took it over; this copy applied nothing.",
            )

    return mark


def _answer_lost(records: QuerySet[IdempotencyRecord], why: str) -> None:
    """The key's stored answer when its write went in but its answer did not:
    409 IDEMPOTENCY_ANSWER_LOST, replayed to every later retry."""
    lost = ApiError(
        ErrorCode.IDEMPOTENCY_ANSWER_LOST,
        f"The first request with this Idempotency-Key was applied, but {why}; "
        "read the current state.",
    )
    records.update(
        status=lost.status,
        body=json.dumps(lost.envelope()).encode(),
        content_type="application/json",
    )


@dataclass(frozen=True)
class Reserved:
    record_id: int
    holder: str


def idempotent_answer(
    request: HttpRequest, answer: Callable[[HttpRequest], HttpResponse]
) -> HttpResponse:
    """``answer(request)`` under the request's Idempotency-Key: reserved before,
    stored after, or the stored answer replayed instead. A request that is not a
    write to the API, or carries no key, is simply answered. The one rule for
    every way a call arrives: the middleware (HTTP) and the direct lane's
    straight calls (zerolock_site.direct)."""
    key = request.headers.get("Idempotency-Key")
    if key is None or request.method not in WRITE_METHODS or not is_api_path(request.path):
        return answer(request)
    if not key or len(key) > MAX_KEY:
        return _error(
            ErrorCode.VALIDATION_ERROR, f"Idempotency-Key must be 1-{MAX_KEY} characters."
        )
    who = request_principal(request)
    if who is None:
        return answer(request)  # DRF answers 401 or 403; nothing stored
    scope = record_scope(who)
    digest = hashlib.sha256(
        b"\n".join([request.method.encode(), request.get_full_path().encode(), request.body])
    ).hexdigest()
    reserved = idempotency_reserve(scope, key, digest)
    if isinstance(reserved, HttpResponse):
        return reserved
    with applied_marking(applied_fence(reserved.record_id, reserved.holder)):
        response = answer(request)
    idempotency_store(reserved, response)
    return response


class IdempotencyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return idempotent_answer(request, self.get_response)


def idempotency_reserve(scope: str, key: str, digest: str) -> Reserved | HttpResponse:
    """The key reserved for this request, or the answer a copy of it gets instead
    (the stored answer, in progress, reused with another request)."""
    holder = secrets.token_hex(16)
    now = timezone.now()
    with sqlite_writer_queue():
        # A new key, the usual case, is one statement, its own transaction (no
        # savepoint, no exception); a record already there is read and decided
        # in a transaction of its own below.
        made = _record_made(scope, key, digest, holder, now)
        if made is not None:
            return Reserved(made, holder)
        return _record_decided(scope, key, digest, holder, now)


def _record_decided(
    scope: str, key: str, digest: str, holder: str, now: datetime
) -> Reserved | HttpResponse:
    """For a key that has a record: reserved afresh (past its day, or taken over
    from a holder gone quiet), or what the copy is told (reused with another
    request, still in progress, or the stored answer)."""
    with transaction.atomic():
        record = IdempotencyRecord.objects.get(scope=scope, key=key)
        if record.created_at < now - TTL:  # kept past its day: the key is free again
            record.delete()
            made = _record_made(scope, key, digest, holder, now)
            if made is not None:
                return Reserved(made, holder)
            # Another retry of this key freed and took it first (PostgreSQL, two
            # processes): decide on its record, as on any other.
            record = IdempotencyRecord.objects.get(scope=scope, key=key)
        if record.request_hash != digest:
            return _error(
                ErrorCode.IDEMPOTENCY_KEY_REUSED,
                "This Idempotency-Key was used with a different request.",
            )
        if record.status is None and record.reserved_at <= now - takeover_after():
            # Held this long: its holder is most likely gone (killed between
            # its write and its answer). Each update is conditional on the
            # holder read here, so of two retries one takes it.
            mine = IdempotencyRecord.objects.filter(
                pk=record.pk, holder=record.holder, status__isnull=True
            )
            if not record.applied and mine.update(holder=holder, reserved_at=now):
                return Reserved(record.pk, holder)
            if record.applied:
                _answer_lost(mine, "the server stopped before its answer was stored")
            record.refresh_from_db()
    if record.status is None:
        return _error(
            ErrorCode.IDEMPOTENCY_IN_PROGRESS,
            "The first request with this Idempotency-Key is still running; retry shortly.",
        )
    replay = HttpResponse(
        bytes(record.body or b""), status=record.status, content_type=record.content_type
    )
    replay["Idempotent-Replayed"] = "true"
    return replay


def idempotency_store(reserved: Reserved, response: HttpResponse) -> None:
    """The answer, kept for retries; only while this request still holds the
    key (a retry that took it over owns it now)."""
    if response.status_code >= 500 or response.status_code == 429:
        with sqlite_writer_queue(), transaction.atomic():
            records = IdempotencyRecord.objects.filter(
                pk=reserved.record_id, holder=reserved.holder, status__isnull=True
            )
            # Not an answer worth replaying: let the retry run, unless the
            # write went in before the failure (a retry would apply it twice).
            if not records.filter(applied=False).delete()[0]:
                _answer_lost(records, "its answer failed")
        return
    with sqlite_writer_queue():  # one statement: its own transaction
        hotsql.update_where(
            IdempotencyRecord,
            {
                "status": response.status_code,
                "body": response.content,
                "content_type": response.get("Content-Type", "application/json"),
            },
            id=reserved.record_id,
            holder=reserved.holder,
            status=None,
        )


def _record_made(scope: str, key: str, digest: str, holder: str, now: datetime) -> int | None:
    """A new record for the key, reserved by ``holder``: its id, or None when the
    key has a record already."""
    made: int | None = hotsql.insert_unless(
        IdempotencyRecord,
        {
            "scope": scope,
            "key": key,
            "request_hash": digest,
            "status": None,
            "body": None,
            "content_type": "",
            "created_at": now,
            "holder": holder,
            "reserved_at": now,
            "applied": False,
        },
        unique=("scope", "key"),
    )
    return made
