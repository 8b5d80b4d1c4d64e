"""``Idempotency-Key`` on writes: a retry with the same key and the same request
gets the stored response instead of a second application.

The key is reserved before the view runs (a unique row), so two copies of one
request racing each other apply once: the second is told the first is still in
progress (409 IDEMPOTENCY_IN_PROGRESS) and retries. Responses are kept 24 hours
per API key; 5xx and 429 are not kept, so those retries run again. A hard crash
between the write and storing its response leaves the key reserved until it
ages out (the write itself is durable either way).

A record belongs to the API key and the agent id (X-Agent-Id) together: two
agents sharing a key each have their own. Only a request that will
authenticate reserves or replays one, so a bad, revoked or expired key, or an
agent its key may not act as, gets DRF's refusal and leaves nothing behind."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from access.auth import request_principal
from access.identity import Principal
from common.db import sqlite_writer_queue
from common.errors import ErrorCode, envelope
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
        replay = self._reserve(scope, key, digest)
        if replay is not None:
            return replay
        response = self.get_response(request)
        self._store(scope, key, response)
        return response

    def _reserve(self, scope: str, key: str, digest: str) -> HttpResponse | None:
        with sqlite_writer_queue(), transaction.atomic():
            IdempotencyRecord.objects.filter(
                scope=scope, key=key, created_at__lt=timezone.now() - TTL
            ).delete()
            try:
                with transaction.atomic():
                    IdempotencyRecord.objects.create(scope=scope, key=key, request_hash=digest)
                    return None
            except IntegrityError:
                record = IdempotencyRecord.objects.get(scope=scope, key=key)
        if record.request_hash != digest:
            return _error(
                ErrorCode.IDEMPOTENCY_KEY_REUSED,
                "This Idempotency-Key was used with a different request.",
            )
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

    def _store(self, scope: str, key: str, response: HttpResponse) -> None:
        with sqlite_writer_queue(), transaction.atomic():
            records = IdempotencyRecord.objects.filter(scope=scope, key=key)
            if response.status_code >= 500 or response.status_code == 429:
                records.delete()  # not an answer worth replaying: let the retry run
                return
            records.update(
                status=response.status_code,
                body=response.content,
                content_type=response.get("Content-Type", "application/json"),
            )
