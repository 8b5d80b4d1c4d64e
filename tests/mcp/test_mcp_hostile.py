"""Hostile JSON-RPC at /mcp, over real sockets to a live server.

Each request below is one a broken or malicious client could send. Every one
must get a JSON-RPC error object or a 4xx, never a 5xx and never a hang (every
request has a timeout), and the server must log no traceback while answering.
The malformed frames go down both of the SDK's paths: the 2025 stateless
transport (no ``MCP-Protocol-Version`` header, as after an ``initialize``) and
the per-request 2026-07-28 one the header selects. After the barrage the server
still answers /api/health and a normal tool call. The key gate (401 before any
JSON-RPC) is checked with no key, an unknown key, a revoked one, and Bearer.

Actors: alice has a key for shards; bob's key is hers with a wrong secret;
mallory's key is revoked mid-test.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from access.identity import Actor
from access.models import ApiKey
from access.services import api_key_create, api_key_revoke
from shards.models import Shard
from shards.services import shard_create
from tests.mcp.helpers import answer_of, error_of, mcp_session

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

TIMEOUT = httpx.Timeout(5.0)
# An answer decided before any work (a parse error, a 405) takes milliseconds;
# this leaves a loaded machine room and is still far short of "held open".
PROMPT_SECONDS = 3.0
MODERN = "2026-07-28"  # the MCP-Protocol-Version that selects the SDK's per-request path
LEGACY = ""  # no header: the stateless 2025 transport
ERAS = [pytest.param(LEGACY, id="2025-transport"), pytest.param(MODERN, id="2026-per-request")]
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
PLAN = {"step": 1, "owner": "alice"}


@dataclass
class Agent:
    """Someone who talks to /mcp with raw HTTP (httpx, no MCP client)."""

    url: str
    key: str | None
    agent_id: str = "alice"
    extra: dict[str, str] = field(default_factory=dict)

    def headers(self, era: str = LEGACY, *, method: str = "", name: str = "") -> dict[str, str]:
        sent = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "X-Agent-Id": self.agent_id,
        }
        if self.key is not None:
            sent["X-API-Key"] = self.key
        if era:
            sent["MCP-Protocol-Version"] = era
            if method:
                sent["Mcp-Method"] = method
            if name:
                sent["Mcp-Name"] = name
        return sent | self.extra

    def send(
        self,
        body: bytes | str,
        era: str = LEGACY,
        *,
        method: str = "",
        name: str = "",
        headers: dict[str, str] | None = None,
        http_method: str = "POST",
        drop: tuple[str, ...] = (),
    ) -> httpx.Response:
        sent = self.headers(era, method=method, name=name) | (headers or {})
        for header in drop:
            sent.pop(header, None)
        content = body.encode() if isinstance(body, str) else body
        return httpx.request(
            http_method, f"{self.url}/mcp", content=content, headers=sent, timeout=TIMEOUT
        )

    def rpc(self, method: str, params: dict[str, Any] | None = None, era: str = LEGACY, **kw: Any):
        """A well-formed JSON-RPC request, as the era expects it to be framed."""
        name = params.get("name", "") if params and method == "tools/call" else ""
        return self.send(frame(method, params, era), era, method=method, name=name, **kw)

    def call(self, tool: str, arguments: Any, era: str = LEGACY, **kw: Any) -> httpx.Response:
        return self.rpc("tools/call", {"name": tool, "arguments": arguments}, era, **kw)


def frame(method: str, params: dict[str, Any] | None = None, era: str = LEGACY, id: Any = 1) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    params = dict(params or {})
    if era == MODERN:
        # The 2026 revision carries the client's version and capabilities in _meta.
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    if params:
        message["params"] = params
    return json.dumps(message)


def rpc_error(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC error object of an answer that is not a 5xx."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    body = response.json()
    assert body.get("jsonrpc") == "2.0" and "result" not in body, body
    error = body["error"]
    assert isinstance(error["code"], int) and isinstance(error["message"], str), error
    return error


def envelope_error(response: httpx.Response) -> dict[str, Any]:
    """The API's error envelope, {"error": {"code", "message"}}, of a 4xx."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and "jsonrpc" not in body, body
    return body["error"]


def tool_result(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, (response.status_code, response.text[:500])
    body = response.json()
    assert "error" not in body, body
    result = body["result"]
    text = result["content"][0]["text"]
    assert json.loads(text) == result["structuredContent"]
    return result


@pytest.fixture
def alice(live_server_url: str) -> Agent:
    _, raw = api_key_create(name="alice", permissions=["shard:read", "shard:write", "shard:create"])
    shard_create(
        actor=Actor("alice"), shard_id="alice-plan", shard_type="decision", initial_value=PLAN
    )
    return Agent(live_server_url, raw)


@pytest.fixture
def server_log(live_server_url: str) -> Iterator[Callable[[], str]]:
    """What the live server wrote to its log since the test began."""
    port = urlsplit(live_server_url).port
    path = Path(settings.DATA_DIR) / f"live-server-{port}.log"
    start = path.stat().st_size

    def written() -> str:
        with open(path, "rb") as log:
            log.seek(start)
            return log.read().decode("utf-8", "replace")

    yield written


def assert_no_server_fault(log: str) -> None:
    faults = [
        line
        for line in log.splitlines()
        if "Traceback" in line or " ERROR " in line or " CRITICAL " in line or "crashed" in line
    ]
    assert not faults, log[-4000:]


# --- malformed frames, on both of the SDK's paths ------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_an_empty_body_gets_a_parse_error_not_a_5xx(alice: Agent, era: str) -> None:
    response = alice.send(b"", era, method="tools/list")
    assert response.status_code == 400
    error = rpc_error(response)
    assert error["code"] == PARSE_ERROR
    assert response.json()["id"] is None


@pytest.mark.parametrize("era", ERAS)
def test_a_truncated_json_rpc_body_gets_a_parse_error_not_a_5xx(alice: Agent, era: str) -> None:
    whole = frame(
        "tools/call", {"name": "shard_read", "arguments": {"shard_id": "alice-plan"}}, era
    )
    for cut in (1, len(whole) // 2, len(whole) - 1):
        response = alice.send(whole[:cut], era, method="tools/call", name="shard_read")
        assert response.status_code == 400, (cut, response.text)
        assert rpc_error(response)["code"] == PARSE_ERROR


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "\xff\xfe"}}',
        b"\xff\xfe\x00{\x00}",  # a UTF-16 byte order mark, and garbage
        b'{"jsonrpc": "2.0", "id": 1, "method": "\xc3\x28"}',  # an invalid 2-byte sequence
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'.encode("utf-32"),
    ],
    ids=["lone-0xff-in-a-string", "bom-and-garbage", "bad-two-byte-sequence", "utf-32"],
)
def test_bytes_that_are_not_utf_8_get_a_parse_error_not_a_5xx(
    alice: Agent, era: str, body: bytes
) -> None:
    response = alice.send(body, era, method="tools/list")
    assert response.status_code == 400, response.text
    code = rpc_error(response)["code"]
    if body.startswith(b"\xff\xfe\x00\x00") and era == MODERN:
        # The per-request path's json.loads reads UTF-32 (RFC 8259 lets a parser):
        # the frame parses, and is refused for what it lacks (its _meta).
        assert code in (INVALID_REQUEST, INVALID_PARAMS)
    else:
        assert code == PARSE_ERROR


@pytest.mark.parametrize("era", ERAS)
def test_a_json_rpc_batch_is_refused_with_an_error_object_and_runs_none_of_it(
    alice: Agent, era: str
) -> None:
    create = json.loads(frame("tools/call", {"name": "shard_create", "arguments": NEW_SHARD}, era))
    batch = json.dumps([json.loads(frame("tools/list", None, era)), create])
    response = alice.send(batch, era, method="tools/list")
    assert response.status_code == 400
    assert rpc_error(response)["code"] in (INVALID_REQUEST, INVALID_PARAMS)
    assert not Shard.objects.filter(pk=NEW_SHARD["id"]).exists()


NEW_SHARD = {"id": "batched-in", "type": "decision", "initial_value": {"x": 1}}


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("body", ["42", '"tools/list"', "null", "true", "[]", "{}"])
def test_a_json_value_that_is_not_a_request_object_gets_an_error_object(
    alice: Agent, era: str, body: str
) -> None:
    response = alice.send(body, era, method="tools/list")
    assert response.status_code == 400, response.text
    assert rpc_error(response)["code"] in (INVALID_REQUEST, INVALID_PARAMS)


@pytest.mark.parametrize("era", ERAS)
def test_an_unknown_method_gets_method_not_found(alice: Agent, era: str) -> None:
    response = alice.rpc("shards/delete_everything", {"all": True}, era)
    error = rpc_error(response)
    assert error["code"] == METHOD_NOT_FOUND
    assert response.json()["id"] == 1  # an answer to that request, not a parse failure


@pytest.mark.parametrize("era", ERAS)
def test_calling_an_unknown_tool_is_an_invalid_params_error_not_a_tool_result(
    alice: Agent, era: str
) -> None:
    response = alice.call("shard_delete", {"shard_id": "alice-plan"}, era)
    error = rpc_error(response)
    assert error["code"] == INVALID_PARAMS
    assert "shard_delete" in error["message"]
    assert Shard.objects.filter(pk="alice-plan").exists()


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("arguments", [["shard_id", "alice-plan"], "alice-plan", 7, True])
def test_tool_arguments_that_are_not_an_object_are_an_invalid_params_error(
    alice: Agent, era: str, arguments: Any
) -> None:
    response = alice.call("shard_read", arguments, era)
    assert rpc_error(response)["code"] == INVALID_PARAMS


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("closed", [True, False], ids=["closed", "never-closed"])
def test_arguments_nested_ten_thousand_levels_deep_get_a_parse_error(
    alice: Agent, era: str, closed: bool
) -> None:
    deep = "[" * 10_000 + ("]" * 10_000 if closed else "")
    head = frame("tools/call", {"name": "shard_read", "arguments": {"shard_id": "alice-plan"}}, era)
    body = head.replace(
        '{"shard_id": "alice-plan"}', '{"shard_id": "alice-plan", "x": ' + deep + "}"
    )
    response = alice.send(body, era, method="tools/call", name="shard_read")
    assert response.status_code == 400
    assert rpc_error(response)["code"] == PARSE_ERROR


@pytest.mark.parametrize("era", ERAS)
def test_a_value_nested_past_the_apis_depth_gets_its_validation_error_as_a_tool_error(
    alice: Agent, era: str
) -> None:
    """Shallow enough for the JSON-RPC parser (120 levels), too deep for the API (64)."""
    nested: Any = "leaf"
    for _ in range(120):
        nested = [nested]
    arguments = {"id": "too-deep", "type": "decision", "initial_value": nested}
    result = tool_result(alice.call("shard_create", arguments, era))
    assert result["isError"] is True and result["_meta"]["zerolock/status"] == 400
    assert result["structuredContent"]["error"]["code"] == "VALIDATION_ERROR"
    assert not Shard.objects.filter(pk="too-deep").exists()


# --- size ------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_arguments_past_the_body_limit_get_the_apis_413_inside_the_tool_result(
    alice: Agent, era: str
) -> None:
    """Inside the frame's allowance (the limit plus 64 KiB for the JSON-RPC around
    it), so the API's own limit is the one that refuses."""
    limit = settings.ZEROLOCK_MAX_BODY_BYTES
    arguments = {"shard_id": "alice-plan", "new_value": "a" * (limit + 10), "expected_version": 1}
    result = tool_result(alice.call("shard_commit", arguments, era))
    assert result["isError"] is True and result["_meta"]["zerolock/status"] == 413
    error = result["structuredContent"]["error"]
    assert (error["code"], error["limit_bytes"]) == ("PAYLOAD_TOO_LARGE", limit)
    assert Shard.objects.get(pk="alice-plan").version == 1


@pytest.mark.parametrize("era", ERAS)
def test_a_frame_past_the_body_limit_gets_413_before_any_json_rpc(alice: Agent, era: str) -> None:
    limit = settings.ZEROLOCK_MAX_BODY_BYTES + 64 * 1024
    arguments = {"shard_id": "alice-plan", "new_value": "a" * (limit + 1), "expected_version": 1}
    response = alice.call("shard_commit", arguments, era)
    assert response.status_code == 413, response.text[:300]
    assert Shard.objects.get(pk="alice-plan").version == 1


def test_a_chunked_body_without_a_length_is_cut_off_at_the_limit_with_413(alice: Agent) -> None:
    """No Content-Length to refuse up front: the server must stop reading when the
    body passes the limit, not buffer all of it."""
    limit = settings.ZEROLOCK_MAX_BODY_BYTES + 64 * 1024
    head = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "shard_read", '
    head += b'"arguments": {"shard_id": "alice-plan", "pad": "'
    chunk = b"a" * 65536
    sent = {"bytes": 0}

    def body() -> Iterator[bytes]:
        yield head
        # Up to 8 times the limit: a server that reads to the end would take it all.
        while sent["bytes"] < 8 * limit:
            sent["bytes"] += len(chunk)
            yield chunk
        yield b'"}}}'

    try:
        response = httpx.post(
            f"{alice.url}/mcp", content=body(), headers=alice.headers(), timeout=TIMEOUT
        )
    except httpx.WriteError:
        pass  # refused and closed while the rest was still being sent: also a refusal
    else:
        assert response.status_code == 413, response.text[:300]
    assert httpx.get(f"{alice.url}/api/health", timeout=TIMEOUT).status_code == 200


# --- the HTTP around the JSON-RPC -----------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
def test_a_wrong_content_type_is_refused_with_a_4xx(
    alice: Agent, era: str, content_type: str | None
) -> None:
    """The types a web page may send to another site without a preflight, and none."""
    arguments = {"id": "by-text", "type": "decision", "initial_value": 1}
    if content_type is None:
        response = alice.call("shard_create", arguments, era, drop=("Content-Type",))
    else:
        response = alice.call(
            "shard_create", arguments, era, headers={"Content-Type": content_type}
        )
    assert response.status_code in (400, 415), (response.status_code, response.text)
    assert not Shard.objects.filter(pk="by-text").exists()


@pytest.mark.parametrize("era", ERAS)
def test_an_accept_header_without_json_gets_406(alice: Agent, era: str) -> None:
    response = alice.call(
        "shard_read", {"shard_id": "alice-plan"}, era, headers={"Accept": "text/html"}
    )
    assert response.status_code == 406, response.text


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("http_method", ["GET", "DELETE", "PUT", "PATCH", "OPTIONS"])
def test_a_method_other_than_post_gets_405_at_once_not_a_silent_stream(
    alice: Agent, era: str, http_method: str
) -> None:
    """A stateless server has no session, so nothing can ever be sent on the SDK's
    GET stream: it used to answer 200 text/event-stream and then hold the
    connection, silent, until the client gave up (found by this test)."""
    response = alice.send(b"", era, http_method=http_method)
    assert response.status_code == 405, (response.status_code, response.text)
    assert response.headers["allow"] == "POST"
    assert response.elapsed.total_seconds() < PROMPT_SECONDS
    assert envelope_error(response)["code"] == "METHOD_NOT_ALLOWED"


def test_a_head_request_gets_405_with_no_body(alice: Agent) -> None:
    response = alice.send(b"", http_method="HEAD")
    assert (response.status_code, response.content) == (405, b"")


@pytest.mark.parametrize(
    "host", ["evil.example", "127.0.0.1.evil.example", "evil.example:8000", "[::2]", "a b"]
)
def test_a_host_outside_allowed_hosts_gets_400_and_no_tool_runs(alice: Agent, host: str) -> None:
    arguments = {"id": "rebound", "type": "decision", "initial_value": 1}
    response = alice.call("shard_create", arguments, headers={"Host": host})
    assert response.status_code == 400, response.text
    assert envelope_error(response)["code"] == "BAD_REQUEST"
    assert not Shard.objects.filter(pk="rebound").exists()


def test_a_bad_host_is_refused_before_the_key_is_looked_at(alice: Agent) -> None:
    nobody = Agent(alice.url, None, extra={"Host": "evil.example"})
    response = nobody.call("shard_read", {"shard_id": "alice-plan"})
    assert response.status_code == 400 and envelope_error(response)["code"] == "BAD_REQUEST"


@pytest.mark.parametrize("era", ERAS)
def test_a_tool_call_sent_as_a_notification_gets_202_and_writes_nothing(
    alice: Agent, era: str
) -> None:
    """No id, so no answer can come back: the call must not run unseen."""
    message = json.loads(frame("tools/call", {"name": "shard_create", "arguments": NEW_SHARD}, era))
    del message["id"]
    response = alice.send(json.dumps(message), era, method="tools/call", name="shard_create")
    assert response.status_code == 202, response.text
    time.sleep(0.3)  # were it running behind the 202, it would be done by now
    assert not Shard.objects.filter(pk=NEW_SHARD["id"]).exists()


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 9, "result": {}},
        {"jsonrpc": "2.0", "id": 9, "error": {"code": 1, "message": "from a client"}},
        {"jsonrpc": "2.0", "id": {"nested": [1]}, "method": "ping"},
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": 12},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "shard_read"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 3}},
    ],
    ids=[
        "a-response",
        "an-error",
        "an-object-id",
        "json-rpc-1",
        "a-numeric-method",
        "string-params",
        "no-tool-name",
        "a-bad-initialize",
    ],
)
def test_odd_json_rpc_shapes_get_an_error_object_or_a_bare_4xx_acknowledgement(
    alice: Agent, message: dict[str, Any]
) -> None:
    response = alice.send(json.dumps(message))
    if response.status_code == 202:
        assert "result" not in response.text  # an acknowledgement, no answer
    else:
        rpc_error(response)


def test_a_body_cut_short_by_a_closed_socket_leaves_the_server_answering(alice: Agent) -> None:
    address = urlsplit(alice.url)
    for _ in range(5):
        with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
            sock.sendall(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: "
                + (alice.key or "").encode()
                + b"\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
                b"Content-Length: 100000\r\n\r\n"
                b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
            )
    result = tool_result(alice.call("shard_read", {"shard_id": "alice-plan"}))
    assert result["structuredContent"]["value"] == PLAN


# --- the barrage, and the server afterwards -------------------------------------------------


def barrage(alice: Agent) -> list[tuple[str, int]]:
    """Everything above in a row, on both paths; (what, status) of each answer."""
    answered: list[tuple[str, int]] = []

    def sent(what: str, response: httpx.Response) -> None:
        assert response.status_code < 500, (what, response.status_code, response.text[:300])
        answered.append((what, response.status_code))

    limit = settings.ZEROLOCK_MAX_BODY_BYTES
    for era in (LEGACY, MODERN):
        whole = frame("tools/call", {"name": "shard_read", "arguments": {"shard_id": "x"}}, era)
        sent("empty", alice.send(b"", era, method="tools/list"))
        sent("truncated", alice.send(whole[:-3], era, method="tools/call", name="shard_read"))
        sent("not utf-8", alice.send(b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}', era))
        sent("batch", alice.send("[" + frame("tools/list", None, era) + "]", era))
        sent("not an object", alice.send("42", era))
        sent("unknown method", alice.rpc("nope/nope", None, era))
        sent("unknown tool", alice.call("nope", {}, era))
        sent("string arguments", alice.call("shard_read", "x", era))
        sent("list arguments", alice.call("shard_read", ["x"], era))
        big = {"shard_id": "alice-plan", "new_value": "a" * (limit + 10), "expected_version": 1}
        sent("huge arguments", alice.call("shard_commit", big, era))
        big["new_value"] = "a" * (limit + 70 * 1024)
        sent("huge frame", alice.call("shard_commit", big, era))
        deep = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
        deep += '{"name": "shard_read", "arguments": {"x": ' + "[" * 10_000 + "}}}"
        sent("deep", alice.send(deep, era, method="tools/call", name="shard_read"))
        sent("text/plain", alice.send(whole, era, headers={"Content-Type": "text/plain"}))
        sent("no content type", alice.send(whole, era, drop=("Content-Type",)))
        sent("GET", alice.send(b"", era, http_method="GET"))
        sent("DELETE", alice.send(b"", era, http_method="DELETE"))
        sent("bad host", alice.send(whole, era, headers={"Host": "evil.example"}))
    return answered


async def test_after_the_barrage_health_answers_and_a_normal_tool_call_still_works(
    alice: Agent, server_log: Callable[[], str]
) -> None:
    started = time.monotonic()
    answered = await sync_to_async(barrage)(alice)
    took = time.monotonic() - started
    assert len(answered) == 34 and all(
        400 <= status < 500 or status == 200 for _, status in answered
    )
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        assert (await http.get(f"{alice.url}/api/health")).status_code == 200
    async with mcp_session(alice.url, alice.key, "alice") as client:
        result = await client.call_tool("shard_read", {"shard_id": "alice-plan"})
        assert not result.is_error and result.meta["zerolock/status"] == 200
        answer = answer_of(result)
        assert (answer["value"], answer["version"]) == (PLAN, 1)
    assert took < 20, f"the barrage took {took:.1f} s"
    assert_no_server_fault(server_log())


# --- the key gate --------------------------------------------------------------------------


@pytest.mark.parametrize("http_method", ["POST", "GET"])
def test_a_call_without_a_key_gets_the_401_envelope_unauthenticated(
    alice: Agent, http_method: str
) -> None:
    nobody = Agent(alice.url, None, agent_id="mallory")
    response = nobody.send(
        frame("tools/call", {"name": "shard_read", "arguments": {"shard_id": "alice-plan"}}),
        http_method=http_method,
    )
    assert response.status_code == 401
    assert envelope_error(response)["code"] == "UNAUTHENTICATED"
    assert response.headers["www-authenticate"] == "X-API-Key"


@pytest.mark.parametrize(
    "wrong", ["", "zl_", "zl_nope.nope", "not a key at all", "x" * 5000], ids=repr
)
def test_an_unusable_key_gets_the_401_envelope(alice: Agent, wrong: str) -> None:
    response = Agent(alice.url, wrong, agent_id="mallory").call(
        "shard_read", {"shard_id": "alice-plan"}
    )
    assert response.status_code == 401, response.text
    assert envelope_error(response)["code"] == "UNAUTHENTICATED"


def test_bobs_key_with_alices_prefix_and_a_wrong_secret_gets_the_401_envelope(alice: Agent) -> None:
    prefix, _, secret = (alice.key or "").partition(".")
    bob = Agent(alice.url, f"{prefix}.{'0' * len(secret)}", agent_id="bob")
    response = bob.call("shard_read", {"shard_id": "alice-plan"})
    assert response.status_code == 401
    assert envelope_error(response)["code"] == "UNAUTHENTICATED"


def test_a_revoked_key_gets_the_401_envelope_within_the_key_cache_time(
    live_server_url: str,
) -> None:
    key, raw = api_key_create(name="mallory", permissions=["shard:read"])
    shard_create(actor=Actor("seed"), shard_id="vault", shard_type="decision", initial_value=1)
    mallory = Agent(live_server_url, raw, agent_id="mallory")
    before = tool_result(mallory.call("shard_read", {"shard_id": "vault"}))
    assert before["structuredContent"]["value"] == 1  # the key worked until now
    api_key_revoke(key=ApiKey.objects.get(pk=key.pk), revoked_by="admin")
    deadline = time.monotonic() + settings.ZEROLOCK_KEY_CACHE_SECONDS + PROMPT_SECONDS
    while True:
        response = mallory.call("shard_read", {"shard_id": "vault"})
        if response.status_code != 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert response.status_code == 401, response.text
    assert envelope_error(response)["code"] == "KEY_REVOKED"


async def test_a_bearer_token_is_taken_like_x_api_key(alice: Agent) -> None:
    async with mcp_session(alice.url, alice.key, "alice", bearer=True) as client:
        answer = answer_of(await client.call_tool("shard_read", {"shard_id": "alice-plan"}))
        assert answer["value"] == PLAN
    wrong_scheme = Agent(alice.url, None, extra={"Authorization": f"Basic {alice.key}"})
    response = await sync_to_async(wrong_scheme.call)("shard_read", {"shard_id": "alice-plan"})
    assert response.status_code == 401
    assert envelope_error(response)["code"] == "UNAUTHENTICATED"


async def test_a_key_without_the_permission_gets_the_apis_403_as_a_tool_error(
    live_server_url: str,
) -> None:
    _, raw = await sync_to_async(api_key_create)(name="bob", permissions=["shard:read"])
    async with mcp_session(live_server_url, raw, "bob") as client:
        result = await client.call_tool(
            "shard_create", {"id": "bobs", "type": "decision", "initial_value": 1}
        )
        assert result.meta["zerolock/status"] == 403
        assert error_of(result)["code"] == "PERMISSION_DENIED"
    assert not await sync_to_async(Shard.objects.filter(pk="bobs").exists)()
