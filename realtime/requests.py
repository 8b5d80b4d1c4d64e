"""API requests over an agent's socket: the ``request`` frame on /ws/agents/.

``{"type": "request", "id": "r1", "method": "POST", "path": "/api/...", "body": {...},
"headers": {"Idempotency-Key": "..."}}`` is answered by ``{"type": "response",
"id": "r1", "status": 200, "body": {...}}`` with the status and body the HTTP
request would get: it runs through the API in this process (``common.inprocess``)
as the socket's key and agent, so permissions, scopes, rate limits, idempotency
and audit are the HTTP request's. Many may be in flight on one socket, answered
as they finish, up to ``ZEROLOCK_WS_MAX_IN_FLIGHT`` (429 past it)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from common.errors import ApiError, ErrorCode, Invalid
from common.inprocess import Answer, answer_body, api_headers, registered_api

METHODS = ("GET", "POST", "DELETE")
# The request headers a frame may set; the key and the agent are the socket's.
FRAME_HEADERS = {"prefer": "Prefer", "idempotency-key": "Idempotency-Key"}
# The answer headers a client needs that the body does not say.
ANSWER_HEADERS = ("link", "retry-after", "preference-applied", "location")
PATH = re.compile(r"/api/[\x21-\x7e]{0,2043}")
# Streams have their own frames on the socket (watch, subscribe).
STREAMS = ("/api/watch",)
MAX_ID = 128


@dataclass(frozen=True)
class RequestFrame:
    id: str | int
    method: str
    path: str
    body: bytes
    headers: dict[str, str]


def frame_id(content: dict[str, Any]) -> str | int | None:
    """The client's id, if it is one a response can carry back."""
    value = content.get("id")
    if isinstance(value, str) and 0 < len(value) <= MAX_ID and value.isprintable():
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53:
        return value
    return None


def request_frame_check(content: dict[str, Any], request_id: str | int) -> RequestFrame:
    method = content.get("method")
    if method not in METHODS:
        raise Invalid(
            f"method must be one of {', '.join(METHODS)}.", fields={"method": ["Unknown."]}
        )
    path = content.get("path")
    if not isinstance(path, str) or not PATH.fullmatch(path):
        raise Invalid(
            "path must be an /api/ path (printable ASCII, no spaces, at most 2048 characters).",
            fields={"path": ["Not an API path."]},
        )
    if path.partition("?")[0] in STREAMS:
        raise Invalid(
            "Streams are frames on this socket: send a watch frame.", fields={"path": ["A stream."]}
        )
    headers: dict[str, str] = {}
    sent = content.get("headers") or {}
    if not isinstance(sent, dict):
        raise Invalid("headers must be an object.", fields={"headers": ["Not an object."]})
    for name, value in sent.items():
        header = FRAME_HEADERS.get(str(name).lower())
        if header is None:
            raise Invalid(
                f"A request frame may set only {', '.join(FRAME_HEADERS.values())}.",
                fields={"headers": [f"{str(name)[:64]!r} is not one of them."]},
            )
        if not isinstance(value, str) or len(value) > 1024 or not value.isprintable():
            raise Invalid(f"{header} must be printable text.", fields={"headers": [header]})
        headers[header] = value
    if "body" in content and content["body"] is not None:
        if method != "POST":
            raise Invalid(f"A {method} request has no body.", fields={"body": ["Not allowed."]})
        try:
            body = json.dumps(content["body"]).encode()
        except (ValueError, RecursionError):
            raise Invalid("The body nests too deeply.", fields={"body": ["Too deep."]}) from None
    else:
        body = b""
    return RequestFrame(id=request_id, method=method, path=path, body=body, headers=headers)


def response_frame(
    request_id: str | int, status: int, body: Any, headers: dict[str, str]
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "response", "id": request_id, "status": status, "body": body}
    shown = {name: headers[name] for name in ANSWER_HEADERS if name in headers}
    if shown:
        frame["headers"] = shown
    return frame


def refused_frame(request_id: str | int, refusal: ApiError) -> dict[str, Any]:
    return response_frame(request_id, refusal.status, refusal.envelope(), {})


def in_flight_refusal(limit: int) -> ApiError:
    return ApiError(
        ErrorCode.TOO_MANY_IN_FLIGHT,
        f"A socket has at most {limit} requests in flight (ZEROLOCK_WS_MAX_IN_FLIGHT): "
        "wait for answers before sending more.",
        limit=limit,
    )


def in_flight_limit() -> int:
    return settings.ZEROLOCK_WS_MAX_IN_FLIGHT


def response_text(request_id: str | int, answer: Answer) -> str:
    """The response frame of an API answer, as the text sent. A JSON body goes in
    as the bytes the API rendered, once checked to be JSON, rather than parsed and
    encoded again."""
    body: Any = None
    if answer.content and "json" in answer.headers.get("content-type", ""):
        try:
            orjson.loads(answer.content)
            body = orjson.Fragment(answer.content)
        except orjson.JSONDecodeError:
            pass  # an integer past 64 bits, or not JSON at all: answer_body decides
    if body is None and answer.content:
        body = answer_body(answer)
    frame = response_frame(request_id, answer.status, body, answer.headers)
    if isinstance(body, orjson.Fragment):
        return orjson.dumps(frame).decode()
    return json.dumps(frame)


async def request_answer(
    frame: RequestFrame,
    *,
    raw_key: str,
    agent_id: str,
    host: str,
    client: tuple[str, int] | None,
    server: tuple[str, int] | None,
) -> str:
    """The response frame's text: the API's answer to this request, made as the
    socket's key and agent."""
    try:
        api = registered_api()
    except ApiError as refusal:
        return json.dumps(refused_frame(frame.id, refusal))
    answer = await api.call(
        method=frame.method,
        path=frame.path,
        headers=api_headers(
            host=host,
            raw_key=raw_key,
            agent_id=agent_id,
            extra=frame.headers,
            json_body=bool(frame.body),
        ),
        body=frame.body,
        client=client,
        server=server,
    )
    return response_text(frame.id, answer)
