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
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from access.auth import request_principal
from access.identity import Principal
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
        if not IdempotencyRecord.objects.filter(pk=record_id, holder=holder).update(applied=True):
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


class IdempotencyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        key = request.headers.get("Idempotency-Key")
        if key is None or request.method not in WRITE_METHODS or not is_api_path(request.path):
            return self.get_response(request)
        if not key or len(key) > MAX_KEY:
            return _error(
                ErrorCode.VALIDATION_ERROR, f"Idempotency-Key must be 1-{MAX_KEY} characters."
            )
        who = request_principal(request)
        if who is None:
            return self.get_response(request)  # DRF answers 401 or 403; nothing stored
        scope = record_scope(who)
        digest = hashlib.sha256(
            b"\n".join([request.method.encode(), request.get_full_path().encode(), request.body])
        ).hexdigest()
        reserved = self._reserve(scope, key, digest)
        if isinstance(reserved, HttpResponse):
            return reserved
        with applied_marking(applied_fence(reserved.record_id, reserved.holder)):
            response = self.get_response(request)
        self._store(reserved, response)
        return response

    def _reserve(self, scope: str, key: str, digest: str) -> Reserved | HttpResponse:
        holder = secrets.token_hex(16)
        now = timezone.now()
        with sqlite_writer_queue(), transaction.atomic():
            IdempotencyRecord.objects.filter(
                scope=scope, key=key, created_at__lt=now - TTL
            ).delete()
            try:
                with transaction.atomic():
                    record = IdempotencyRecord.objects.create(
                        scope=scope, key=key, request_hash=digest, holder=holder
                    )
                    return Reserved(record.pk, holder)
            except IntegrityError:
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

    def _store(self, reserved: Reserved, response: HttpResponse) -> None:
        """The answer, kept for retries; only while this request still holds the
        key (a retry that took it over owns it now)."""
        with sqlite_writer_queue(), transaction.atomic():
            records = IdempotencyRecord.objects.filter(
                pk=reserved.record_id, holder=reserved.holder, status__isnull=True
            )
            if response.status_code >= 500 or response.status_code == 429:
                # Not an answer worth replaying: let the retry run, unless the
                # write went in before the failure (a retry would apply it twice).
                if not records.filter(applied=False).delete()[0]:
                    _answer_lost(records, "its answer failed")
                return
            records.update(
                status=response.status_code,
                body=response.content,
                content_type=response.get("Content-Type", "application/json"),
            )
