"""The MCP tools: each one is a REST operation, named for models.

A tool call becomes the REST request it stands for (``Tool.request``) and goes
through the API in this process, so permissions, scopes, agent binding, rate
limits, idempotency and audit are the API's own. The names and argument names
are fixed: clients and prompts depend on them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from common.errors import Invalid

from .schemas import path_parameters, path_value_ok, tool_input_schema

WAIT_MAX_SECONDS = 50  # under the ~60 s an MCP client gives one call

REFUSALS = (
    " A refusal is a tool error whose content is the API's error envelope, "
    '{"error": {"code": ..., "message": ..., ...}}: PERMISSION_DENIED (the key lacks '
    "the permission or the shard is outside its scopes: ask a person, do not retry), "
    "SHARD_NOT_FOUND, VALIDATION_ERROR (fix the arguments it names), RATE_LIMITED "
    "(wait retry_after seconds)."
)


@dataclass(frozen=True)
class Tool:
    name: str
    method: str
    path: str  # the OpenAPI path, with {parameters}
    description: str
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    # Arguments sent as headers, not in the body: {argument: header}.
    headers: Mapping[str, str] = field(default_factory=dict)
    # Arguments the MCP layer handles itself (a wait), not sent.
    local: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    # Body fields the document leaves to additionalProperties, named for models.
    body_extra: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    required: list[str] | None = None
    drop_body_rules: bool = False
    # Body fields not offered to models: they mean nothing over /mcp.
    omit: frozenset[str] = frozenset()
    # For a DELETE answered 204: the word a model is told instead of nothing
    # ({"<id parameter>": id, "<ended_as>": true}).
    ended_as: str = ""

    def ended(self, path: str) -> dict[str, Any]:
        """What the empty answer of this DELETE means, for a model."""
        parameter = self.path.rsplit("{", 1)[-1].rstrip("}")
        return {parameter: unquote(path.rsplit("/", 1)[-1]), self.ended_as: True}

    def input_schema(self, document: dict[str, Any]) -> dict[str, Any]:
        extra = (
            dict(self.body_extra)
            | {name: HEADER_ARGUMENTS[name] for name in self.headers}
            | dict(self.local)
        )
        if self.method == "GET" or self.method == "DELETE" or not _has_body(document, self):
            schema: dict[str, Any] = {
                "type": "object",
                "properties": path_parameters(document, self.method, self.path) | extra,
                "required": list(path_parameters(document, self.method, self.path)),
                "additionalProperties": False,
            }
            return schema
        schema = tool_input_schema(
            document,
            self.method,
            self.path,
            extra=extra,
            required=self.required,
            drop_body_rules=self.drop_body_rules,
        )
        for name in self.omit:
            schema["properties"].pop(name, None)
        return schema

    def annotations(self) -> dict[str, Any]:
        hints: dict[str, Any] = {"readOnlyHint": self.read_only, "openWorldHint": False}
        if not self.read_only:
            hints["destructiveHint"] = self.destructive
            hints["idempotentHint"] = self.idempotent
        return hints

    def request(self, document: dict[str, Any], arguments: Any) -> ApiCall:
        """The REST request for these arguments, or ``Invalid`` naming what is
        wrong with them (the API's own VALIDATION_ERROR)."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise Invalid("The arguments must be a JSON object.")
        body = dict(arguments)
        path = self.path
        for name, schema in path_parameters(document, self.method, self.path).items():
            value = body.pop(name, None)
            if value is None:
                raise Invalid(f"{name} is required.", fields={name: ["This field is required."]})
            if not path_value_ok(schema, value):
                raise Invalid(
                    f"{name} is not a valid {name}.",
                    fields={name: [f"Must match {schema.get('pattern', 'its pattern')}."]},
                )
            path = path.replace("{" + name + "}", quote(value, safe=""))
        headers: dict[str, str] = {}
        for name, header in self.headers.items():
            value = body.pop(name, None)
            if value is None:
                continue
            if not isinstance(value, str) or not value.isprintable() or len(value) > 255:
                raise Invalid(
                    f"{name} must be a string of up to 255 printable characters.",
                    fields={name: ["Not a valid header value."]},
                )
            headers[header] = value
        local = {name: body.pop(name) for name in list(body) if name in self.local}
        if self.method in ("GET", "DELETE") and body:
            unknown = sorted(body)
            raise Invalid(
                f"Unknown arguments: {', '.join(unknown)}.",
                fields={name: ["Unknown argument."] for name in unknown},
            )
        sends_body = self.method == "POST" and _has_body(document, self)
        return ApiCall(
            self.method, path, body if sends_body else None, headers=headers, local=local
        )


@dataclass(frozen=True)
class ApiCall:
    method: str
    path: str
    body: dict[str, Any] | None
    headers: dict[str, str] = field(default_factory=dict)
    local: dict[str, Any] = field(default_factory=dict)


HEADER_ARGUMENTS: dict[str, dict[str, Any]] = {
    "idempotency_key": {
        "type": "string",
        "maxLength": 255,
        "description": "Sent as the Idempotency-Key header: a retry with the same key gets the "
        "first answer again instead of writing twice. Use one per intended write.",
    },
}


def _has_body(document: dict[str, Any], tool: Tool) -> bool:
    op = document["paths"][tool.path][tool.method.lower()]
    return "requestBody" in op


TOOLS: tuple[Tool, ...] = (
    Tool(
        "shard_read",
        "GET",
        "/api/shards/{shard_id}",
        "Read a shard: its value and version. Read before deciding; commit against the "
        "version you read." + REFUSALS,
        read_only=True,
        idempotent=True,
    ),
    Tool(
        "shard_create",
        "POST",
        "/api/shards",
        "Create a shard: type 'decision' (one value, optimistic concurrency: every commit "
        "names the version it read) or 'additive' (a CRDT map or list that merges "
        "concurrent appends). reversible=false makes every commit wait for a person's "
        "approval. SHARD_EXISTS (409): it exists already, read it instead." + REFUSALS,
    ),
    Tool(
        "shard_commit",
        "POST",
        "/api/shards/{shard_id}/commit",
        "Write a shard. Decision shards: new_value and the expected_version you read. "
        "Additive shards: append (items for a list, entries for a map) or delta. "
        "On STALE_VERSION (409) someone committed first: the error carries "
        "current_version and current_value; read them, decide again, and commit against "
        "current_version. Do not retry the same version. On APPROVAL_REQUIRED (403) the "
        "shard is irreversible: call approval_request, wait with approval_get, and the "
        "approved value is committed for you. Pass idempotency_key so a retry after a "
        "lost answer cannot write twice." + REFUSALS,
        destructive=True,
        headers={"idempotency_key": "Idempotency-Key"},
        # Additive commits: the REST body takes these beside the decision fields
        # (docs/api.md, Commit to an additive shard); the API checks which fits.
        body_extra={
            "append": {
                "type": "array",
                "minItems": 1,
                "description": "Additive array shards: the items to append, in order.",
            },
            "delta": {
                "type": "array",
                "minItems": 1,
                "description": 'Additive text shards: a Quill/Yjs delta, e.g. [{"retain": 5}, '
                '{"insert": "abc"}, {"delete": 2}].',
            },
        },
        required=[],
        drop_body_rules=True,
    ),
    Tool(
        "task_claim",
        "POST",
        "/api/shards/{shard_id}/claim",
        "Claim one task from a task-queue shard atomically: the first task whose fields "
        "equal `where` gets the fields in `set` and you as holder; nobody else can claim "
        "it. NOTHING_TO_CLAIM (404): no task matches, the queue is done or all are held. "
        "Give lease_id so the claim is released if you stop keeping the lease alive, and "
        "fence to refuse stale holders." + REFUSALS,
        destructive=True,
    ),
    Tool(
        "txn",
        "POST",
        "/api/txn",
        "An atomic transaction across shards: if every compare holds (a shard's version, "
        "or a field compared with ==, !=, <, >, exists, not_exists) the success "
        "operations run, else the failure ones; all or nothing. The answer says which "
        "branch ran (succeeded) and what each get read." + REFUSALS,
        destructive=True,
    ),
    Tool(
        "lease_grant",
        "POST",
        "/api/leases",
        "Grant a lease for ttl_seconds: claims and path locks bound to it are released when "
        "it ends. Keep it alive with lease_keepalive before the ttl runs out; its fence "
        "token orders holders." + REFUSALS,
        # A session lease lives with an agent socket (/ws/agents/), which /mcp is not.
        omit=frozenset({"session"}),
    ),
    Tool(
        "lease_keepalive",
        "POST",
        "/api/leases/{lease_id}/keepalive",
        "Renew a lease you hold for another ttl_seconds. LEASE_NOT_FOUND (404): it ended "
        "and what it held was released; re-read before acting on it." + REFUSALS,
        idempotent=True,
    ),
    Tool(
        "lease_revoke",
        "DELETE",
        "/api/leases/{lease_id}",
        "End a lease you hold now, releasing what is bound to it." + REFUSALS,
        destructive=True,
        idempotent=True,
        ended_as="revoked",
    ),
    Tool(
        "reservation_create",
        "POST",
        "/api/reservations",
        "Reserve the files you are about to edit, as glob patterns of repository paths "
        "(e.g. ['src/parser/**/*.py']; * within a directory, ** across directories), for "
        "ttl_seconds or as long as lease_id lives. Exclusive (the default) keeps every other "
        "agent out of any path both patterns match; exclusive=false only says you read "
        "them. RESERVATION_CONFLICT (409): another agent holds an overlapping pattern; "
        "the error lists each holder, its reason and expires_at, and a path both match: "
        "work on something else or wait, do not edit those files. TOO_MANY_RESERVATIONS "
        "(409): your key holds the most live reservations it may; release ones you are done "
        "with. Release with reservation_release when done." + REFUSALS,
    ),
    Tool(
        "reservation_check",
        "POST",
        "/api/reservations/check",
        "Before writing or committing files, ask which of these paths fall in another "
        "agent's exclusive reservation. An empty conflicts list means none does; your own "
        "reservations are never reported." + REFUSALS,
        read_only=True,
        idempotent=True,
    ),
    Tool(
        "reservation_release",
        "DELETE",
        "/api/reservations/{reservation_id}",
        "End a reservation you hold, so other agents may take those paths. "
        "RESERVATION_NOT_FOUND (404): it has already ended." + REFUSALS,
        destructive=True,
        idempotent=True,
        ended_as="released",
    ),
    Tool(
        "approval_request",
        "POST",
        "/api/approvals/request",
        "Ask a person to approve proposed_value for an irreversible shard, based on "
        "expected_version. Answers at once with the approval (status 'pending') and "
        "console_url, the page where a person decides: show it to your user. Then call "
        "approval_get with wait_seconds until the status is decided. An approved value is "
        "committed by the server ('committed' status, commit has the version); do not "
        "commit it yourself." + REFUSALS,
    ),
    Tool(
        "approval_get",
        "GET",
        "/api/approvals/{approval_id}",
        "Read an approval. With wait_seconds (0-50) it waits until the approval is decided "
        "or the wait ends, whichever is first: call it again while status is 'pending'. "
        "'approved'/'committed': the value was applied; 'rejected': see rejection_reason "
        "and do not retry unchanged; 'changes_requested': reason is the officer's message: "
        "change the value as asked and request again with previous_id set to this id; "
        "'expired' or 'approved_stale': the shard moved on, read it and ask again. When "
        "edited is true an officer changed the value: applied_value is what was written."
        + REFUSALS,
        read_only=True,
        idempotent=True,
        local={
            "wait_seconds": {
                "type": "integer",
                "minimum": 0,
                "maximum": WAIT_MAX_SECONDS,
                "default": 0,
                "description": "How long to wait for a decision (seconds, at most 50).",
            }
        },
    ),
)

BY_NAME = {tool.name: tool for tool in TOOLS}


def wait_seconds(local: Mapping[str, Any]) -> int:
    value = local.get("wait_seconds", 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= WAIT_MAX_SECONDS:
        raise Invalid(
            f"wait_seconds must be an integer from 0 to {WAIT_MAX_SECONDS}.",
            fields={"wait_seconds": [f"An integer from 0 to {WAIT_MAX_SECONDS}."]},
        )
    return value
