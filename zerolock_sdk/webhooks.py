"""Receiving ZeroLock's webhooks (docs/api.md, "Webhooks"): the signature
check and a small ASGI receiver that the runtime bridges (Restate's, Inngest's)
build on.

A delivery is a JSON POST signed in the Standard Webhooks style; ZeroLock
retries it until a 2xx, so the same ``webhook-id`` can arrive more than once and
a bridge passes it on as its own deduplication key."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

TOLERANCE_SECONDS = 300  # a replayed capture older than this is refused
MAX_BODY = 1 << 20

OnEvent = Callable[[dict[str, Any], str], Awaitable[None]]


class WebhookVerificationError(ValueError):
    """The delivery is not ZeroLock's (bad or missing signature) or too old."""


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float | None = None,
    tolerance_seconds: int = TOLERANCE_SECONDS,
) -> dict[str, Any]:
    """The event (``{"type", "timestamp", "data"}``) if ``body`` is signed with
    the subscription's ``whsec_`` secret; raises WebhookVerificationError if not."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        message_id = lower["webhook-id"]
        timestamp = int(lower["webhook-timestamp"])
        signatures = lower["webhook-signature"]
    except (KeyError, ValueError) as missing:
        raise WebhookVerificationError("missing or malformed webhook headers") from missing
    if abs((time.time() if now is None else now) - timestamp) > tolerance_seconds:
        raise WebhookVerificationError("webhook timestamp outside the tolerance")
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    # Standard Webhooks: several space-separated "v1,<sig>" (a secret being rotated).
    for candidate in signatures.split():
        version, _, signature = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(signature, expected):
            return json.loads(body)
    raise WebhookVerificationError("no valid webhook signature")


def webhook_receiver(secret: str, on_event: OnEvent) -> Callable[..., Awaitable[None]]:
    """An ASGI app: verifies each POST and awaits ``on_event(event, webhook_id)``.
    It answers 2xx only once ``on_event`` returned, so a delivery whose hand-off
    failed (the runtime down) is retried by ZeroLock; 401 for a bad signature."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await _answer(send, 405, "POST only")
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                await _answer(send, 413, "too large")
                return
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            event = verify_webhook(secret, headers, body)
        except WebhookVerificationError as refused:
            await _answer(send, 401, str(refused))
            return
        await on_event(event, headers["webhook-id"])
        await _answer(send, 204, "")

    return app


async def _answer(send: Any, status: int, text: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": text.encode()})
