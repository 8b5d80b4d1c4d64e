"""The ZeroLock client: a thin, stateless wrapper over the REST API.

Every correctness decision stays on the server; the client turns answers into
typed results and errors into exceptions. 429 is retried (honouring
Retry-After, bounded); nothing else is retried behind the caller's back, except
a request whose socket closed before its answer (``connect_ws``): it is sent
again over HTTP, a write with the Idempotency-Key it was first sent with."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any, Unpack
from urllib.parse import urlsplit

import httpx

from .errors import MissingApiKeyError, RateLimitedError, ZeroLockError, error_from
from .models import (
    NO_EDIT,
    Approval,
    ClaimedTask,
    CommitOptions,
    CommitResult,
    CreateShardOptions,
    Lease,
    Reservation,
    ReservationConflict,
    Shard,
    TxnResult,
)
from .transport import AgentSocket, SocketDown, frame_body

URL_ENV, KEY_ENV = "ZEROLOCK_URL", "ZEROLOCK_API_KEY"
DEFAULT_URL = "http://127.0.0.1:8000"  # where `make run` listens
# The only paths the server answers without a key: probes and the API's own docs.
PUBLIC_PATHS = frozenset({"/api/health", "/api/schema", "/api/docs"})
# RFC 7240: the server leaves the value out of a write's answer (and says so).
PREFER_MINIMAL = {"Prefer": "return=minimal"}
# The most paths one POST /api/reservations/check takes (the server refuses more).
MAX_CHECK_PATHS = 1000
# A re-sent write whose first copy is still running is told so (409): it waits
# this long at first, doubling up to the most, within ``max_retry_wait`` in all.
IN_PROGRESS = "IDEMPOTENCY_IN_PROGRESS"
IN_PROGRESS_FIRST_WAIT, IN_PROGRESS_MOST_WAIT = 0.05, 1.0


def resolve_url(base_url: str | None) -> str:
    """The URL given, else ``$ZEROLOCK_URL``, else the local ``make run`` server."""
    return (base_url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def resolve_api_key(api_key: str | None) -> str:
    """The key given, else ``$ZEROLOCK_API_KEY``; "" when there is none (the first
    call that needs one then raises ``MissingApiKeyError`` saying how to set it)."""
    return api_key or os.environ.get(KEY_ENV, "")


class ZeroLockClient:
    """``async with ZeroLockClient(url, agent_id="planner") as zl: ...``

    ``base_url`` defaults to ``$ZEROLOCK_URL`` (then ``http://127.0.0.1:8000``),
    ``api_key`` to ``$ZEROLOCK_API_KEY``."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        agent_id: str = "",
        api_key: str | None = None,
        timeout: float = 30.0,
        max_rate_limit_retries: int = 3,
        max_retry_wait: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = resolve_url(base_url)
        self.agent_id = agent_id
        self.api_key = api_key = resolve_api_key(api_key)
        self.max_rate_limit_retries = max_rate_limit_retries
        self.max_retry_wait = max_retry_wait
        headers = {"X-API-Key": api_key} if api_key else {}
        if agent_id:
            headers["X-Agent-Id"] = agent_id
        self.timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )
        self._socket: AgentSocket | None = None
        self.requests_sent = 0

    async def __aenter__(self) -> ZeroLockClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close()
        await self._http.aclose()

    # --- the agent socket ------------------------------------------------------------

    async def connect_ws(self) -> None:
        """Opens this agent's socket (/ws/agents/), raising if it cannot. From
        then on every request but ``watch`` and the keyless probes goes over it
        as a request frame, and every write carries an Idempotency-Key (yours,
        else a new one). While the socket is down requests go over HTTP, a
        write whose socket closed before its answer is sent again over HTTP
        with the same key (applied once), and the socket reconnects by itself."""
        if self._socket is not None:
            return
        self._socket = AgentSocket(
            self._socket_url(),
            self.ws_headers(),
            timeout=self.timeout,
            on_push=self._pushed,
            on_open=self._socket_opened,
        )
        try:
            await self._socket.connect()
        except BaseException:
            self._socket = None
            raise

    @property
    def socket_open(self) -> bool:
        return self._socket is not None and self._socket.is_open

    def _socket_url(self) -> str:
        return self.ws_url

    async def _pushed(self, event: dict[str, Any]) -> None:
        """A frame the server pushed on the socket; the plain client needs none."""

    async def _socket_opened(self) -> None:
        """The socket is open (again)."""

    # --- plumbing ------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        minimal: bool = False,
    ) -> Any:
        """``minimal``: ask for the answer without the value (``Prefer:
        return=minimal``), for callers that do not read it."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        if minimal:
            headers.update(PREFER_MINIMAL)
        body, _ = await self._send(method, path, json_body, params, headers)
        return body

    async def _send(
        self,
        method: str,
        path: str,
        json_body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[Any, httpx.Response]:
        """The answer's JSON and the response (for its headers), retrying 429s."""
        public = path.split("?")[0] in PUBLIC_PATHS
        if not self.api_key and not public:
            # Refused here rather than sent: a keyless request can only get a 401,
            # and each one is an auth failure in the server's audit log.
            raise MissingApiKeyError()
        headers = dict(headers or {})
        socket = None if public else self._socket
        if socket is not None:
            if params:
                query = str(httpx.QueryParams(params))
                path, params = f"{path}{'&' if '?' in path else '?'}{query}", None
            if method != "GET" and "Idempotency-Key" not in headers:
                # Whatever carries it in the end, the server applies it once.
                headers["Idempotency-Key"] = str(uuid.uuid4())
        rate_limited, resent = 0, False
        in_progress_wait, in_progress_waited = IN_PROGRESS_FIRST_WAIT, 0.0
        while True:
            self.requests_sent += 1
            answer = None
            if socket is not None and socket.is_open:
                try:
                    answer = await socket.request(method, path, json_body, headers)
                except SocketDown:
                    resent = True  # over HTTP now, with the same Idempotency-Key
            if answer is not None:
                response = httpx.Response(answer.status, headers=answer.headers)
                body = answer.body
            else:
                response, body = await self._over_http(
                    method, path, json_body, params, headers, framed=socket is not None
                )
            if response.is_success:
                return (None if response.status_code == 204 else body), response
            error = error_from(response.status_code, body, response.headers.get("Retry-After"))
            if isinstance(error, RateLimitedError) and rate_limited < self.max_rate_limit_retries:
                rate_limited += 1
                await asyncio.sleep(min(error.retry_after, self.max_retry_wait))
                continue
            if resent and error.code == IN_PROGRESS and in_progress_waited < self.max_retry_wait:
                # Our own first copy (on the socket that closed) is still running.
                await asyncio.sleep(in_progress_wait)
                in_progress_waited += in_progress_wait
                in_progress_wait = min(in_progress_wait * 2, IN_PROGRESS_MOST_WAIT)
                continue
            raise error

    async def _over_http(
        self,
        method: str,
        path: str,
        json_body: Any,
        params: dict[str, Any] | None,
        headers: dict[str, str],
        *,
        framed: bool,
    ) -> tuple[httpx.Response, Any]:
        """``framed``: the body encoded as a request frame's is, so a write that
        may have gone over the socket is the same request here (its key's)."""
        if framed and json_body is not None:
            headers = {**headers, "Content-Type": "application/json"}
            response = await self._http.request(
                method, path, content=frame_body(json_body), params=params, headers=headers
            )
        else:
            response = await self._http.request(
                method, path, json=json_body, params=params, headers=headers or None
            )
        try:
            body = response.json() if response.status_code != 204 else None
        except ValueError:
            body = None
        return response, body

    def _relative(self, url: str) -> str:
        """A ``next`` link as a path for the next request: the server names it
        absolutely, with the scheme and host it was asked on."""
        if url.startswith(self.base_url):
            return url[len(self.base_url) :]
        parts = urlsplit(url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    # --- shards -------------------------------------------------------------------

    async def create_shard(self, shard_id: str, options: CreateShardOptions | None = None) -> Shard:
        body = (options or CreateShardOptions()).body(shard_id)
        return Shard.from_json(await self.request("POST", "/api/shards", json_body=body))

    async def get_shard(self, shard_id: str) -> Shard:
        return Shard.from_json(await self.request("GET", f"/api/shards/{shard_id}"))

    async def list_shards(self, *, prefix: str = "", type: str = "") -> list[Shard]:
        params: dict[str, str] | None = {
            k: v for k, v in {"prefix": prefix, "type": type}.items() if v
        }
        shards, path = [], "/api/shards"
        while path:
            page = await self.request("GET", path, params=params)
            shards += [Shard.from_json(s) for s in page["results"]]
            path, params = self._relative(page["next"] or ""), None
        return shards

    async def commit(
        self,
        shard_id: str,
        expected_version: int,
        new_value: Any,
        *,
        read_set: dict[str, int] | None = None,
        approval_id: str | None = None,
        fence: int | None = None,
        idempotency_key: str | None = None,
        minimal: bool = False,
    ) -> CommitResult:
        """Commits ``new_value`` on ``expected_version``. ``minimal``: the server
        does not send the value back (``result.value`` is then None).

        The version comes first here and second in ``commit_shard`` (the seed's
        order); keywords (``expected_version=``, ``new_value=``) read the same in
        both. A version that is not an integer is refused before anything is
        sent, saying so: it is nearly always the two swapped."""
        if not isinstance(expected_version, int) or isinstance(expected_version, bool):
            raise TypeError(
                f"expected_version must be an int, not {type(expected_version).__name__}: "
                "commit(shard_id, expected_version, new_value) takes the version first, "
                "commit_shard(shard_id, new_value, expected_version) second; "
                "pass both by keyword to be sure"
            )
        body: dict[str, Any] = {"expected_version": expected_version, "new_value": new_value}
        if read_set:
            body["read_set"] = read_set
        if approval_id:
            body["approval_id"] = approval_id
        if fence is not None:
            body["fence"] = fence
        data = await self.request(
            "POST",
            f"/api/shards/{shard_id}/commit",
            json_body=body,
            idempotency_key=idempotency_key,
            minimal=minimal,
        )
        return CommitResult.from_json(data)

    async def commit_shard(
        self,
        shard_id: str,
        new_value: Any,
        expected_version: int,
        **options: Unpack[CommitOptions],
    ) -> CommitResult:
        """The seed's name and argument order for ``commit``: the value, then the
        version it was based on; ``options`` are ``commit``'s keywords."""
        return await self.commit(shard_id, expected_version, new_value, **options)

    async def _additive(
        self, shard_id: str, body: dict[str, Any], key: str | None, minimal: bool
    ) -> CommitResult:
        data = await self.request(
            "POST",
            f"/api/shards/{shard_id}/commit",
            json_body=body,
            idempotency_key=key,
            minimal=minimal,
        )
        return CommitResult.from_json(data)

    async def append(
        self,
        shard_id: str,
        items: list[Any],
        *,
        idempotency_key: str | None = None,
        minimal: bool = False,
    ) -> CommitResult:
        """Appends to an additive array shard (never stale). ``minimal``: the
        server does not send the whole array back (``result.value`` is None)."""
        return await self._additive(shard_id, {"append": list(items)}, idempotency_key, minimal)

    async def patch_map(
        self,
        shard_id: str,
        patch: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        minimal: bool = False,
    ) -> CommitResult:
        """Sets keys of an additive map shard (``None`` deletes a key)."""
        return await self._additive(shard_id, {"new_value": patch}, idempotency_key, minimal)

    async def text_delta(
        self,
        shard_id: str,
        delta: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        minimal: bool = False,
    ) -> CommitResult:
        """Applies a Quill/Yjs delta to an additive text shard."""
        return await self._additive(shard_id, {"delta": list(delta)}, idempotency_key, minimal)

    async def history(self, shard_id: str) -> list[dict[str, Any]]:
        """Every version, oldest first: a history cut short by the server's byte
        cap says where it goes on in its ``Link: rel="next"``, which is followed."""
        versions: list[dict[str, Any]] = []
        path: str | None = f"/api/shards/{shard_id}/history"
        while path:
            page, response = await self._send("GET", path)
            versions.extend(page)
            following = response.links.get("next", {}).get("url")
            path = self._relative(following) if following else None
        return versions

    async def delete_shard(self, shard_id: str) -> None:
        await self.request("DELETE", f"/api/shards/{shard_id}")

    # --- approvals ----------------------------------------------------------------

    async def request_approval(
        self,
        shard_id: str,
        proposed_value: Any,
        expected_version: int,
        description: str,
        *,
        ttl_seconds: int = 3600,
        idempotency_key: str | None = None,
        previous_id: str | None = None,
    ) -> Approval:
        """``idempotency_key``: a repeat of this request (same key and body) gets
        the first answer, the same approval, instead of asking the humans a second
        time: a runtime's retried step, or a LangGraph node re-run on resume.
        ``previous_id``: the earlier request (same shard, same key) this one
        follows, e.g. after a decider asked for changes."""
        body = {
            "shard_id": shard_id,
            "proposed_value": proposed_value,
            "expected_version": expected_version,
            "description": description,
            "ttl_seconds": ttl_seconds,
        }
        if previous_id:
            body["previous_id"] = previous_id
        return Approval.from_json(
            await self.request(
                "POST", "/api/approvals/request", json_body=body, idempotency_key=idempotency_key
            )
        )

    async def list_approvals(
        self, *, status: str = "", shard_id: str = "", requested_by: str = ""
    ) -> list[Approval]:
        """Every approval that matches, newest first, through the keyset pages
        (``next``): each once, even while new ones are requested."""
        wanted = {"status": status, "shard_id": shard_id, "requested_by": requested_by}
        params: dict[str, str] | None = {k: v for k, v in wanted.items() if v}
        approvals, path = [], "/api/approvals"
        while path:
            page = await self.request("GET", path, params=params)
            approvals += [Approval.from_json(a) for a in page["results"]]
            path, params = self._relative(page["next"] or ""), None
        return approvals

    async def get_approval(self, approval_id: str) -> Approval:
        return Approval.from_json(await self.request("GET", f"/api/approvals/{approval_id}"))

    async def approve(
        self,
        approval_id: str,
        reason: str = "",
        *,
        edited_value: Any = NO_EDIT,
        expected_value_hash: str | None = None,
    ) -> Approval:
        """``edited_value``: approve this value instead of the proposal (None is a
        value); the server checks it like a commit and applies it.
        ``expected_value_hash``: the ``applied_value_hash`` you reviewed; if another
        decider edited the value since, the server answers 409
        APPROVAL_VALUE_CHANGED (a ``ConflictError``) and records nothing."""
        body: dict[str, Any] = {"reason": reason}
        if edited_value is not NO_EDIT:
            body["edited_value"] = edited_value
        if expected_value_hash is not None:
            body["expected_value_hash"] = expected_value_hash
        data = await self.request("POST", f"/api/approvals/{approval_id}/approve", json_body=body)
        return Approval.from_json(data)

    async def request_changes(self, approval_id: str, message: str) -> Approval:
        """Ends the request (status "changes_requested"); ``message`` goes to the agent."""
        data = await self.request(
            "POST",
            f"/api/approvals/{approval_id}/request-changes",
            json_body={"message": message},
        )
        return Approval.from_json(data)

    async def reject(self, approval_id: str, reason: str) -> Approval:
        data = await self.request(
            "POST", f"/api/approvals/{approval_id}/reject", json_body={"reason": reason}
        )
        return Approval.from_json(data)

    async def create_approval_policy(
        self,
        *,
        shard_prefix: str,
        effect: str,
        reason: str,
        when: list[dict[str, Any]] | None = None,
        requested_by: str = "",
        key_prefix: str = "",
        ttl_seconds: int | None = None,
        expires_at: str | None = None,
    ) -> dict[str, Any]:
        """``POST /api/approval-policies`` (permission ``approval:policy``): new
        requests that match are decided by the policy at once. ``when``: compares
        on the proposed value with the ``txn`` operators, e.g.
        ``[{"path": ["amount"], "op": "<", "value": 100}]``. Give ``ttl_seconds``
        or ``expires_at`` (ISO 8601). Returns the policy (``id`` is "pol_...")."""
        body: dict[str, Any] = {
            "shard_prefix": shard_prefix,
            "effect": effect,
            "reason": reason,
            "when": when or [],
            "requested_by": requested_by,
            "key_prefix": key_prefix,
        }
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        if expires_at is not None:
            body["expires_at"] = expires_at
        data: dict[str, Any] = await self.request("POST", "/api/approval-policies", json_body=body)
        return data

    async def list_approval_policies(
        self, *, shard_prefix: str | None = None, effect: str = "", live: bool | None = None
    ) -> list[dict[str, Any]]:
        """The policies within this key's scopes, oldest first."""
        params: dict[str, str] = {}
        if shard_prefix is not None:
            params["shard_prefix"] = shard_prefix
        if effect:
            params["effect"] = effect
        if live is not None:
            params["live"] = "true" if live else "false"
        page = await self.request("GET", "/api/approval-policies", params=params or None)
        results: list[dict[str, Any]] = page["results"]
        return results

    async def get_approval_policy(self, policy_id: str) -> dict[str, Any]:
        data: dict[str, Any] = await self.request("GET", f"/api/approval-policies/{policy_id}")
        return data

    async def delete_approval_policy(self, policy_id: str) -> None:
        """Ends a policy now; requests it already decided stay decided."""
        await self.request("DELETE", f"/api/approval-policies/{policy_id}")

    # --- transactions, leases, watch ------------------------------------------------

    async def txn(
        self,
        *,
        compare: list[dict[str, Any]] | None = None,
        success: list[dict[str, Any]] | None = None,
        failure: list[dict[str, Any]] | None = None,
        fence: int | None = None,
        idempotency_key: str | None = None,
        minimal: bool = False,
    ) -> TxnResult:
        """One transaction. ``minimal``: the server leaves ``responses`` out (for
        callers that read only ``succeeded`` and the versions)."""
        body: dict[str, Any] = {
            "compare": compare or [],
            "success": success or [],
            "failure": failure or [],
        }
        if fence is not None:
            body["fence"] = fence
        data = await self.request(
            "POST", "/api/txn", json_body=body, idempotency_key=idempotency_key, minimal=minimal
        )
        return TxnResult.from_json(data)

    async def claim(
        self,
        shard_id: str,
        *,
        where: dict[str, Any],
        set: dict[str, Any],
        lease_id: str | None = None,
        fence: int | None = None,
        idempotency_key: str | None = None,
        minimal: bool = True,
    ) -> ClaimedTask:
        """``POST /api/shards/{id}/claim``: the server picks a task whose fields
        equal ``where``, sets ``set`` and the holder (this agent). Raises
        ``NotFoundError`` (code ``NOTHING_TO_CLAIM``) when none matches. The
        queue's whole value comes back only with ``minimal=False``."""
        body: dict[str, Any] = {"where": where, "set": set}
        if lease_id:
            body["lease_id"] = lease_id
        if fence is not None:
            body["fence"] = fence
        data = await self.request(
            "POST",
            f"/api/shards/{shard_id}/claim",
            json_body=body,
            idempotency_key=idempotency_key,
            minimal=minimal,
        )
        return ClaimedTask.from_json(data)

    async def grant_lease(self, ttl_seconds: int) -> Lease:
        data = await self.request("POST", "/api/leases", json_body={"ttl_seconds": ttl_seconds})
        return Lease.from_json(data)

    async def keepalive(self, lease_id: str) -> Lease:
        return Lease.from_json(await self.request("POST", f"/api/leases/{lease_id}/keepalive"))

    async def revoke_lease(self, lease_id: str) -> None:
        await self.request("DELETE", f"/api/leases/{lease_id}")

    async def watch(
        self, *, prefix: str = "", since: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Every change under ``prefix`` after revision ``since``, then live ones
        (server-sent events; resume with the last ``revision`` you saw)."""
        if not self.api_key:
            raise MissingApiKeyError()
        params: dict[str, Any] = {"prefix": prefix}
        if since is not None:
            params["since"] = since
        async with self._http.stream("GET", "/api/watch", params=params, timeout=None) as response:
            if response.status_code != 200:
                body = json.loads(await response.aread() or b"null")
                raise error_from(response.status_code, body)
            data = None
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    data = json.loads(line[6:])
                elif line == "" and data is not None:
                    yield data
                    data = None

    # --- path reservations ----------------------------------------------------------

    async def reserve(
        self,
        patterns: Iterable[str],
        *,
        exclusive: bool = True,
        ttl_seconds: int | None = None,
        reason: str | None = None,
        lease_id: str | None = None,
    ) -> Reservation:
        """Reserves the paths the globs match (``src/**/*.py``) for this agent.
        Exclusive (the default) refuses every other agent's overlapping pattern;
        shared ones stand beside shared ones. ``ttl_seconds`` is required unless
        ``lease_id`` binds it to a lease (it then ends with the lease). Raises
        ``ReservationConflictError`` (``.conflicts``) when another agent holds an
        overlapping one. A lone string is one pattern, not its characters."""
        body: dict[str, Any] = {
            "patterns": [patterns] if isinstance(patterns, str) else list(patterns),
            "exclusive": exclusive,
        }
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        if reason is not None:
            body["reason"] = reason
        if lease_id is not None:
            body["lease_id"] = lease_id
        return Reservation.from_json(
            await self.request("POST", "/api/reservations", json_body=body)
        )

    async def list_reservations(
        self, *, holder: str | None = None, path: str | None = None
    ) -> list[Reservation]:
        """The live reservations, oldest first: all, one holder's, or those with a
        pattern matching ``path``. The server lists at most 1000 (it has no pages
        for these: narrow by ``holder`` or ``path`` when there are more)."""
        wanted = {"holder": holder, "path": path}
        params = {k: v for k, v in wanted.items() if v is not None}
        data = await self.request("GET", "/api/reservations", params=params or None)
        return [Reservation.from_json(r) for r in data["results"]]

    async def check_reservations(self, paths: Iterable[str]) -> list[ReservationConflict]:
        """Which of ``paths`` fall in another agent's live exclusive reservation
        (this agent's own, and shared ones, never do): what to ask before writing
        or committing them. Sent in batches of the server's 1000-path limit, each
        path once; no paths, no request."""
        wanted = list(dict.fromkeys([paths] if isinstance(paths, str) else paths))
        conflicts: list[ReservationConflict] = []
        for start in range(0, len(wanted), MAX_CHECK_PATHS):
            batch = wanted[start : start + MAX_CHECK_PATHS]
            data = await self.request("POST", "/api/reservations/check", json_body={"paths": batch})
            conflicts += [ReservationConflict.from_json(c) for c in data["conflicts"]]
        return conflicts

    async def keepalive_reservation(self, reservation_id: str) -> Reservation:
        """Another ``ttl_seconds`` from now. One bound to a lease lives as long as
        the lease: keep the lease alive instead (this answers it unchanged)."""
        data = await self.request("POST", f"/api/reservations/{reservation_id}/keepalive")
        return Reservation.from_json(data)

    async def release_reservation(self, reservation_id: str) -> None:
        """Ends it now. ``NotFoundError`` (code ``RESERVATION_NOT_FOUND``) once it
        has ended already, by release, its time or its lease."""
        await self.request("DELETE", f"/api/reservations/{reservation_id}")

    # --- the rest -------------------------------------------------------------------

    async def audit(self, **filters: Any) -> list[dict[str, Any]]:
        return await self.request(
            "GET", "/api/audit", params={k: v for k, v in filters.items() if v}
        )

    async def metrics(self) -> dict[str, Any]:
        return await self.request("GET", "/api/metrics")

    async def ws_metrics(self) -> dict[str, Any]:
        return await self.request("GET", "/api/metrics/ws")

    async def health(self) -> dict[str, Any]:
        try:
            return await self.request("GET", "/api/health")
        except ZeroLockError as error:
            return {"status": "degraded", **error.details}

    def ws_headers(self) -> dict[str, str]:
        """The handshake headers for /ws/agents/ (raises if there is no key)."""
        if not self.api_key:
            raise MissingApiKeyError()
        headers = {"X-API-Key": self.api_key}
        if self.agent_id:
            headers["X-Agent-Id"] = self.agent_id
        return headers

    @property
    def ws_url(self) -> str:
        return (
            self.base_url.replace("https://", "wss://").replace("http://", "ws://") + "/ws/agents/"
        )
