"""``/mcp``: the Model Context Protocol endpoint, on the web server's own port.

The official SDK's low-level server answers JSON-RPC over its streamable HTTP
transport, stateless (no session is kept: any process behind a balancer can take
any call) and with JSON answers. Before any JSON-RPC, the key is checked with
the API's own rule (``access.auth.key_admit``): a call without a usable key gets
the API's 401 envelope. Each tool call then becomes its REST request and runs
through the API in this process (``PooledWsgiToAsgi.call``): the same
middleware, authentication, views, services and audit as over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import reverse
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from access.auth import key_admit
from approvals.selectors import approval_pending
from common.errors import ApiError, ErrorCode, Invalid, envelope
from common.inprocess import Api, answer_body, api_headers

from .tools import BY_NAME, TOOLS, ApiCall, Tool, wait_seconds

logger = logging.getLogger(__name__)
# Between the checks of a pending approval while approval_get waits: a decision
# is seen within this long (a status read by primary key, not an API call).
WAIT_POLL_SECONDS = 0.25
SHARD_URI = "zerolock://shards/{shard_id}"
PENDING_URI = "zerolock://approvals/pending"
INSTRUCTIONS = (
    "ZeroLock coordinates agents that share state. Read a shard before deciding, and "
    "commit against the version you read; on STALE_VERSION read again and decide again. "
    "Claim work with task_claim so no task is done twice. Irreversible shards need a "
    "person's approval: approval_request, then approval_get with wait_seconds."
)


@dataclass(frozen=True)
class Caller:
    """Who sent a /mcp request, as its API calls will say it."""

    raw_key: str
    agent_id: str
    host: str
    scheme: str
    client: tuple[str, int] | None
    server: tuple[str, int] | None

    def headers(self, extra: dict[str, str]) -> list[tuple[bytes, bytes]]:
        return api_headers(
            host=self.host,
            raw_key=self.raw_key,
            agent_id=self.agent_id,
            extra=extra,
            json_body=True,
        )


def raw_key_of(headers: dict[str, str]) -> str:
    """X-API-Key, or ``Authorization: Bearer <key>`` for clients that can set only that."""
    raw = headers.get("x-api-key", "").strip()
    if raw:
        return raw
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def transport_security() -> TransportSecuritySettings:
    """The SDK's DNS-rebinding check, on, with the hosts of ALLOWED_HOSTS. Django's
    wildcards ("*", ".example.com") have no spelling in the SDK's list: with one of
    them the SDK checks only Content-Type, and the gate applies Django's own
    ``validate_host`` to every request, as every other page does."""
    literal = [h for h in settings.ALLOWED_HOSTS if h and h != "*" and not h.startswith(".")]
    if len(literal) != len([h for h in settings.ALLOWED_HOSTS if h]):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts = [form for h in literal for form in (h, f"{h}:*")]
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class McpEndpoint:
    """The ASGI application at /mcp."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.server: Server[Any] = Server(
            "zerolock",
            version="0.1.0",
            title="ZeroLock",
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            # The SDK checks Mcp-Param-* headers on every call against the tool's
            # schema; without this it ran the whole tools/list handler to find it
            # (30 % of an MCP call's server CPU, bench/README.md).
            get_tool_input_schema=self._input_schema,
        )
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            stateless=True,
            security_settings=transport_security(),
            # The JSON-RPC frame around an API body: the API's own limit still
            # holds for the body inside (over_body_limit, in the bridge).
            max_request_body_size=settings.ZEROLOCK_MAX_BODY_BYTES + 64 * 1024,
        )
        self._running: asyncio.Event | None = None
        self._document: dict[str, Any] | None = None
        self._tools: list[types.Tool] | None = None
        self._schemas: dict[str, dict[str, Any]] = {}

    # --- ASGI ---------------------------------------------------------------------

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await self._ensure_running()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        domain, _ = split_domain_port(host)
        if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
            await _send_json(send, 400, envelope(ErrorCode.BAD_REQUEST, "Host not allowed."))
            return
        raw = raw_key_of(headers)
        client = scope.get("client")
        try:
            key = await self.api.run_sync(
                _admitted, raw, client[0] if client else None, scope["path"]
            )
        except ApiError as refusal:
            extra = [(b"www-authenticate", b"X-API-Key")] if refusal.status == 401 else []
            retry = refusal.details.get("retry_after")
            if retry is not None:
                extra.append((b"retry-after", str(retry).encode()))
            await _send_json(send, refusal.status, refusal.envelope(), extra)
            return
        if scope.get("method") != "POST":
            # Stateless, so nothing could ever be sent on the SDK's GET stream
            # (no session routes a message to it): it held the connection open,
            # silent, until the client gave up. The spec's answer for a server
            # without one is 405; DELETE has no session to end either.
            await _send_json(
                send,
                405,
                envelope(ErrorCode.METHOD_NOT_ALLOWED, "Send JSON-RPC with POST."),
                [(b"allow", b"POST")],
            )
            return
        agent_id = headers.get("x-agent-id", "").strip()
        if not agent_id and len(key.agent_ids) == 1:
            agent_id = key.agent_ids[0]  # the key's single bound agent
        scope = dict(scope)
        scope["zerolock.caller"] = Caller(
            raw_key=raw,
            agent_id=agent_id,
            host=host,
            scheme=scope.get("scheme", "http"),
            client=tuple(client) if client else None,
            server=tuple(scope["server"]) if scope.get("server") else None,
        )
        await self.manager.handle_request(scope, receive, send)

    async def _ensure_running(self) -> None:
        """The SDK's manager runs inside a task group for the process's life: the
        web server (Channels' router) sends no ASGI lifespan to enter it with."""
        if self._running is None:
            self._running = asyncio.Event()
            asyncio.get_running_loop().create_task(self._run_manager(self._running))
        await self._running.wait()

    async def _run_manager(self, running: asyncio.Event) -> None:
        async with self.manager.run():
            running.set()
            await asyncio.Event().wait()  # until the process ends

    # --- the API, in process --------------------------------------------------------

    async def api_call(self, caller: Caller, call: ApiCall) -> tuple[int, Any]:
        try:
            body = b"" if call.body is None else json.dumps(call.body).encode()
        except (ValueError, TypeError, RecursionError):
            # Whatever JSON-RPC parsed is JSON; this is for depth past the encoder's.
            raise Invalid("The arguments nest too deeply to send.") from None
        answer = await self.api.call(
            method=call.method,
            path=call.path,
            headers=caller.headers(call.headers),
            body=body,
            client=caller.client,
            server=caller.server,
            scheme=caller.scheme,
        )
        return answer.status, answer_body(answer)

    async def document(self, caller: Caller) -> dict[str, Any]:
        """The API's OpenAPI document, as GET /api/schema serves it (once a process)."""
        if self._document is None:
            status, data = await self.api_call(
                caller, ApiCall("GET", "/api/schema?format=json", None)
            )
            if status != 200 or not isinstance(data, dict):
                raise MCPError(types.INTERNAL_ERROR, "The API's schema is not available.")
            self._document = data
        return self._document

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        """A tool's input schema once tools/list has built them; None before then,
        and the SDK then has nothing to check (none of ours declares a header)."""
        return self._schemas.get(name)

    # --- tools ---------------------------------------------------------------------

    async def list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if self._tools is None:
            document = await self.document(_caller(ctx))
            self._tools = [
                types.Tool(
                    name=tool.name,
                    title=tool.name.replace("_", " "),
                    description=tool.description,
                    input_schema=tool.input_schema(document),
                    annotations=types.ToolAnnotations(
                        read_only_hint=tool.read_only,
                        destructive_hint=None if tool.read_only else tool.destructive,
                        idempotent_hint=None if tool.read_only else tool.idempotent,
                        open_world_hint=False,
                    ),
                )
                for tool in TOOLS
            ]
            self._schemas = {tool.name: tool.input_schema for tool in self._tools}
        return types.ListToolsResult(tools=self._tools)

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = BY_NAME.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name[:100]!r}.")
        caller = _caller(ctx)
        try:
            call = tool.request(await self.document(caller), params.arguments)
            wait = wait_seconds(call.local) if tool.name == "approval_get" else 0
        except ApiError as refusal:
            return _result(400, refusal.envelope(), is_error=True)
        try:
            status, data = await self.api_call(caller, call)
        except ApiError as refusal:
            return _result(400, refusal.envelope(), is_error=True)
        if wait and status == 200 and isinstance(data, dict) and data.get("status") == "pending":
            status, data = await self._wait_for_decision(caller, call, wait)
        if status >= 400:
            return _result(status, data, is_error=True)
        return _result(status, self._shaped(tool, caller, call, data), is_error=False)

    async def _wait_for_decision(self, caller: Caller, call: ApiCall, wait: int) -> tuple[int, Any]:
        """Until the approval is no longer pending (decided, or past its expiry)
        or ``wait`` seconds pass; then the API's answer for it again."""
        approval_id = call.path.rsplit("/", 1)[-1]
        deadline = time.monotonic() + wait
        # A server shutting down ends the wait: the call is then answered with the
        # API's 503 SHUTTING_DOWN, and the client asks another process.
        while time.monotonic() < deadline and not self.api.draining:
            await asyncio.sleep(min(WAIT_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            if not await self.api.run_sync(approval_pending, approval_id):
                break
        return await self.api_call(caller, call)

    def _shaped(self, tool: Tool, caller: Caller, call: ApiCall, data: Any) -> Any:
        if tool.name == "approval_request" and isinstance(data, dict) and "id" in data:
            path = reverse("console-detail", args=[data["id"]])
            return data | {"console_url": f"{caller.scheme}://{caller.host}{path}"}
        if tool.ended_as and data is None:
            # REST answers 204 with no body; a model is told what happened.
            return tool.ended(call.path)
        return data

    # --- resources -----------------------------------------------------------------

    async def list_resources(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=PENDING_URI,
                    name="pending approvals",
                    description="Approvals waiting for a person, within the key's scopes.",
                    mime_type="application/json",
                )
            ]
        )

    async def list_resource_templates(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=SHARD_URI,
                    name="shard",
                    description="A shard's value and version (GET /api/shards/{id}).",
                    mime_type="application/json",
                )
            ]
        )

    async def read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        caller = _caller(ctx)
        uri = str(params.uri)
        if uri == PENDING_URI:
            call = ApiCall("GET", "/api/approvals?status=pending", None)
        elif uri.startswith("zerolock://shards/"):
            arguments = {"shard_id": uri[len("zerolock://shards/") :]}
            try:
                call = BY_NAME["shard_read"].request(await self.document(caller), arguments)
            except ApiError as refusal:
                raise MCPError(types.INVALID_PARAMS, refusal.message, refusal.envelope()) from None
        else:
            raise MCPError(-32002, f"No such resource: {uri[:200]}")
        status, data = await self.api_call(caller, call)
        if status >= 400:
            code = -32002 if status == 404 else types.INVALID_PARAMS
            message = (
                data.get("error", {}).get("message", "Refused.") if isinstance(data, dict) else ""
            )
            raise MCPError(code, message, data)
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=uri, mime_type="application/json", text=json.dumps(data)
                )
            ]
        )


def _admitted(raw: str, address: str | None, path: str) -> Any:
    return key_admit(raw, address=address, path=path)


def _caller(ctx: Any) -> Caller:
    request = getattr(ctx, "request", None)
    caller = getattr(request, "scope", {}).get("zerolock.caller") if request is not None else None
    if not isinstance(caller, Caller):
        # Every request passes the gate, which sets it; never act without one.
        raise MCPError(types.INVALID_REQUEST, "Unauthenticated.")
    return caller


def _result(status: int, data: Any, *, is_error: bool) -> types.CallToolResult:
    """A tool's answer: the API's JSON as structured content and as text, its HTTP
    status in ``_meta``; a refusal (the API's envelope) is ``isError``."""
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(data))],
        structured_content=data,
        is_error=is_error,
        _meta={"zerolock/status": status},
    )


async def _send_json(
    send: Any, status: int, data: dict[str, Any], extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    content = json.dumps(data).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
