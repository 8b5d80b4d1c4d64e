"""LangGraph on ZeroLock (``pip install zerolock[langgraph]``).

``ZeroLockSaver`` keeps a graph's checkpoints in shards, so several workers can
resume one thread and every step is audited; ``approval_interrupt`` and
``resume_when_decided`` pause a graph on a ZeroLock approval and resume it with
the decision; ``create_zerolock_tools`` gives an agent read, commit and claim as
(async) tools.

Layout: one decision shard per checkpoint, ``lg.<thread>.<ns>.<inverted id>``,
written once (its create), and one per checkpoint that has pending writes, the
same id plus ``.w``, written with ``/api/txn`` puts at paths. The server's audit
log keeps every version's whole value, so a shard that held a whole thread (the
0.x layout) made each step store the thread again: storage grew with the square
of the thread. Now each step stores what it made. ``<thread>`` and ``<ns>`` are
hashes; the checkpoint id's hex digits are inverted (``f - d``), so the list of a
thread's shards, which the server orders by id, starts at the newest checkpoint:
the latest is one ``GET /api/shards?prefix=...&limit=2`` (it and its writes).
Concurrent writers of one thread never lose each other's writes: checkpoints
never share a shard, and writes are puts at their own paths. Serialized parts
are the saver's ``serde`` output, base64-encoded."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.config import get_config
from langgraph.types import Command, interrupt

from .approvals import ApprovalClient
from .client import ZeroLockClient
from .errors import ConflictError, NotFoundError, StaleCommitError, ZeroLockError
from .models import Approval, CreateShardOptions
from .task_claim import claim_next, claim_task, claim_tool_answer

PREFIX = "lg."
WRITES_SUFFIX = ".w"
# How many checkpoints' writes shards a saver remembers having made, so that its
# own second put_writes on a checkpoint goes straight to a put (no create to fail).
KNOWN_WRITES = 4096
# At most this many deletes in flight while a thread is deleted.
DELETES_IN_FLIGHT = 8
_INVERT = str.maketrans("0123456789abcdef", "fedcba9876543210")


def thread_prefix(thread_id: str) -> str:
    """Every shard of a thread, in every namespace, starts with this."""
    return f"{PREFIX}{hashlib.sha256(thread_id.encode()).hexdigest()[:32]}."


def namespace_prefix(thread_id: str, checkpoint_ns: str) -> str:
    """Every shard of one namespace of a thread, newest checkpoint first."""
    ns = hashlib.sha256(checkpoint_ns.encode()).hexdigest()[:16]
    return f"{thread_prefix(thread_id)}{ns}."


def checkpoint_shard_id(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """The shard holding one checkpoint (its pending writes: this plus ``.w``).
    LangGraph's checkpoint ids are UUIDs whose text order is their time order;
    inverting the digits makes the newest sort first."""
    lowered = checkpoint_id.lower()
    if not lowered or lowered.strip("0123456789abcdef-"):
        raise ValueError(f"checkpoint id {checkpoint_id!r} is not a LangGraph (UUID) id")
    return namespace_prefix(thread_id, checkpoint_ns) + lowered.translate(_INVERT)


def legacy_thread_shard_id(thread_id: str, checkpoint_ns: str) -> str:
    """The 0.x layout's one shard per thread, which this saver does not read:
    ``ZeroLockSaver.migrate_legacy_thread`` copies it into this layout; delete it
    (``DELETE /api/shards/{id}``) once its thread is not needed."""
    digest = hashlib.sha256(f"{thread_id}\x00{checkpoint_ns}".encode()).hexdigest()[:32]
    return f"{PREFIX}{digest}"


def _pack(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode()]


def _unpack(packed: list[str]) -> tuple[str, bytes]:
    return packed[0], base64.b64decode(packed[1])


def _ref(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class ZeroLockSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose storage is ZeroLock shards:
    ``ZeroLockSaver(url, api_key=KEY, agent_id="worker-1")``. Sync and async
    (``graph.invoke`` and ``graph.ainvoke``). The key needs ``shard:read``,
    ``shard:write`` and ``shard:create``; ``delete_thread`` needs ``admin``."""

    def __init__(self, base_url: str, *, api_key: str, agent_id: str = "langgraph", **kwargs: Any):
        super().__init__(**kwargs)
        self._api_key, self._agent_id = api_key, agent_id
        self._base_url = base_url
        self._clients: dict[int, ZeroLockClient] = {}
        self._known_writes: dict[str, None] = {}
        # Sync calls run the async ones on a private loop.
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="zerolock-saver", daemon=True).start()

    def _client(self) -> ZeroLockClient:
        loop = id(asyncio.get_running_loop())
        if loop not in self._clients:
            self._clients[loop] = ZeroLockClient(
                self._base_url, api_key=self._api_key, agent_id=self._agent_id
            )
        return self._clients[loop]

    @property
    def requests_sent(self) -> int:
        """Requests this saver's clients have sent (the benchmark counts them)."""
        return sum(client.requests_sent for client in self._clients.values())

    def _sync(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    # --- storage ----------------------------------------------------------------

    async def _shards(self, prefix: str, page: int = 100) -> AsyncIterator[dict[str, Any]]:
        """The shards whose id starts with ``prefix``, in id order (newest
        checkpoint first), a page at a time: a caller that stops early reads no more."""
        path: str | None = "/api/shards"
        params: dict[str, Any] | None = {"prefix": prefix, "limit": page}
        while path:
            answer = await self._client().request("GET", path, params=params)
            for shard in answer["results"]:
                yield shard
            following = answer.get("next")
            path = self._client()._relative(following) if following else None
            params = None

    def _tuple(self, saved: dict[str, Any], writes: dict[str, Any] | None) -> CheckpointTuple:
        thread_id, ns = saved["thread_id"], saved["checkpoint_ns"]
        # LangGraph replays a step's writes in (task_path, task_id, idx) order.
        stored = sorted((writes or {}).values(), key=lambda w: (w[4], w[0], w[5]))
        parent = saved.get("parent")
        return CheckpointTuple(
            config=_ref(thread_id, ns, saved["checkpoint_id"]),
            checkpoint=self.serde.loads_typed(_unpack(saved["checkpoint"])),
            metadata=self.serde.loads_typed(_unpack(saved["metadata"])),
            parent_config=_ref(thread_id, ns, parent) if parent else None,
            pending_writes=[(w[0], w[1], self.serde.loads_typed(_unpack(w[2:4]))) for w in stored],
        )

    async def _paired(
        self, prefix: str, page: int = 100
    ) -> AsyncIterator[tuple[dict[str, Any], dict[str, Any] | None]]:
        """(checkpoint value, its writes or None), newest first: a checkpoint's
        writes shard sorts right after it."""
        held: dict[str, Any] | None = None
        held_id = ""
        async for shard in self._shards(prefix, page):
            if shard["id"].endswith(WRITES_SUFFIX):
                if held is not None and shard["id"] == held_id + WRITES_SUFFIX:
                    yield held, shard["value"].get("writes")
                    held = None
                continue  # the writes of a checkpoint that is gone
            if held is not None:
                yield held, None
            held, held_id = shard["value"], shard["id"]
        if held is not None:
            yield held, None

    # --- the async interface ------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        wanted = get_checkpoint_id(config)
        prefix = (
            checkpoint_shard_id(thread_id, ns, wanted)
            if wanted
            else namespace_prefix(thread_id, ns)
        )
        # The newest checkpoint (or the one named) and its writes: the first two.
        async for saved, writes in self._paired(prefix, page=2):
            return self._tuple(saved, writes)
        return None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if config is None:
            return  # every thread of the server: not listed
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        wanted = get_checkpoint_id(config)
        below = get_checkpoint_id(before) if before else None
        prefix = (
            checkpoint_shard_id(thread_id, ns, wanted)
            if wanted
            else namespace_prefix(thread_id, ns)
        )
        page = min(1000, 2 * limit + 2) if limit else 100
        count = 0
        async for saved, writes in self._paired(prefix, page):
            if below and saved["checkpoint_id"] >= below:
                continue
            found = self._tuple(saved, writes)
            if filter and any(found.metadata.get(k) != v for k, v in filter.items()):
                continue
            yield found
            count += 1
            if limit is not None and count >= limit:
                return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        shard_id = checkpoint_shard_id(thread_id, ns, checkpoint["id"])
        saved = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent": configurable.get("checkpoint_id"),
            "checkpoint": _pack(self.serde.dumps_typed(checkpoint)),
            "metadata": _pack(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
        }
        try:
            await self._client().create_shard(shard_id, CreateShardOptions(initial_value=saved))
        except ConflictError as exists:
            if exists.code != "SHARD_EXISTS":
                raise
            # The same checkpoint saved again (rare): the newer save wins, as in
            # LangGraph's own savers.
            await self._client().txn(
                success=[{"op": "put", "shard_id": shard_id, "path": [], "value": saved}],
                minimal=True,
            )
        return _ref(thread_id, ns, checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if not writes:
            return
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        checkpoint_id = configurable["checkpoint_id"]
        shard_id = checkpoint_shard_id(thread_id, ns, checkpoint_id) + WRITES_SUFFIX
        stored: dict[str, list[Any]] = {}
        for index, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, index)
            packed = _pack(self.serde.dumps_typed(value))
            stored[f"{task_id}:{idx}"] = [task_id, channel, *packed, task_path, idx]
        if shard_id not in self._known_writes:
            # The first writes of a checkpoint make its writes shard: one request.
            initial = {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
                "writes": stored,
            }
            try:
                await self._client().create_shard(
                    shard_id, CreateShardOptions(initial_value=initial)
                )
            except ConflictError as exists:
                if exists.code != "SHARD_EXISTS":
                    raise  # another writer made it first: put ours beside its
            else:
                self._remember(shard_id)
                return
        puts = [
            {"op": "put", "shard_id": shard_id, "path": ["writes", inner], "value": write}
            for inner, write in stored.items()
        ]
        await self._client().txn(success=puts, minimal=True)
        self._remember(shard_id)

    def _remember(self, writes_shard_id: str) -> None:
        self._known_writes[writes_shard_id] = None
        while len(self._known_writes) > KNOWN_WRITES:
            del self._known_writes[next(iter(self._known_writes))]

    async def adelete_thread(self, thread_id: str) -> None:
        """Deletes every shard of the thread, in every namespace (needs ``admin``).
        The shard rows go; the audit log, append-only, keeps each version's entry."""
        prefix = thread_prefix(thread_id)
        ids = [shard["id"] async for shard in self._shards(prefix, page=1000)]
        self._known_writes = {k: None for k in self._known_writes if not k.startswith(prefix)}
        gate = asyncio.Semaphore(DELETES_IN_FLIGHT)

        async def delete(shard_id: str) -> None:
            async with gate:
                # NotFound: deleted meanwhile by another deleter.
                with contextlib.suppress(NotFoundError):
                    await self._client().delete_shard(shard_id)

        await asyncio.gather(*(delete(shard_id) for shard_id in ids))

    async def amigrate_legacy_thread(
        self, thread_id: str, checkpoint_ns: str = "", *, delete: bool = False
    ) -> int:
        """Copies a thread the 0.x saver wrote (one shard, ``legacy_thread_shard_id``)
        into this layout, as it was stored (nothing is deserialized), and returns
        how many checkpoints it copied (0: no such shard). Run again, it copies
        only what is missing. ``delete``: then deletes the old shard (``admin``)."""
        legacy = legacy_thread_shard_id(thread_id, checkpoint_ns)
        try:
            old = (await self._client().get_shard(legacy)).value
        except NotFoundError:
            return 0
        present = {
            shard["id"] async for shard in self._shards(namespace_prefix(thread_id, checkpoint_ns))
        }
        copied = 0
        for checkpoint_id, saved in sorted(old.get("checkpoints", {}).items()):
            shard_id = checkpoint_shard_id(thread_id, checkpoint_ns, checkpoint_id)
            ids = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
            if shard_id not in present:
                value = {**ids, "checkpoint_id": checkpoint_id, **saved}
                await self._client().create_shard(shard_id, CreateShardOptions(initial_value=value))
                copied += 1
            writes = old.get("writes", {}).get(checkpoint_id)
            if writes and shard_id + WRITES_SUFFIX not in present:
                stored = {
                    inner: [*write, int(inner.rsplit(":", 1)[1])] for inner, write in writes.items()
                }
                value = {**ids, "checkpoint_id": checkpoint_id, "writes": stored}
                await self._client().create_shard(
                    shard_id + WRITES_SUFFIX, CreateShardOptions(initial_value=value)
                )
        if delete:
            await self._client().delete_shard(legacy)
        return copied

    # --- the sync interface, for graph.invoke -----------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self.aget_tuple(config))

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, **kwargs)]

        yield from self._sync(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self.adelete_thread(thread_id))

    def migrate_legacy_thread(
        self, thread_id: str, checkpoint_ns: str = "", *, delete: bool = False
    ) -> int:
        return self._sync(self.amigrate_legacy_thread(thread_id, checkpoint_ns, delete=delete))

    def get_next_version(self, current: str | None, channel: None) -> str:
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}"


# --- the approval bridge --------------------------------------------------------------

# The key an approval interrupt's value carries its approval id under.
APPROVAL_INTERRUPT = "zerolock_approval"


def _approval_key(thread_id: str, shard_id: str, version: int, value: Any, why: str) -> str:
    """One request per thread and change: the same node run again (on resume,
    or replayed from an earlier checkpoint) asks with the same key and body,
    and the server answers with the first approval instead of a second one."""
    body = json.dumps([thread_id, shard_id, version, value, why], sort_keys=True)
    return "langgraph-approval:" + hashlib.sha256(body.encode()).hexdigest()


async def approval_interrupt(
    client: ZeroLockClient,
    shard_id: str,
    proposed_value: Any,
    expected_version: int,
    description: str,
    *,
    ttl_seconds: int = 3600,
) -> Approval:
    """Inside an (async) node of a graph with a checkpointer: asks ZeroLock to
    approve ``proposed_value`` for ``shard_id`` at ``expected_version`` and pauses
    the graph (LangGraph ``interrupt()``, whose value is ``{"zerolock_approval":
    id, ...}``) until it is decided; ``resume_when_decided`` resumes it.

    Returns the decided ``Approval``, read from ZeroLock, never from the resume
    value: ``status`` "approved" (``applied``: the server wrote the value when
    it was approved, once; ``commit`` has the version), "rejected", "expired",
    or "stale" (approved but not applicable: the shard moved on). The node runs
    again from its start on resume; its request is made once per thread and
    change (an Idempotency-Key), so build ``proposed_value`` from the graph's
    state, not from a read in the same node (a read after the approval applied
    would propose another value: another request). The client's key needs
    ``approval:request`` and ``shard:read``."""
    thread_id = str(get_config().get("configurable", {}).get("thread_id", ""))
    key = _approval_key(thread_id, shard_id, expected_version, proposed_value, description)
    asked = await client.request_approval(
        shard_id,
        proposed_value,
        expected_version,
        description,
        ttl_seconds=ttl_seconds,
        idempotency_key=key,
    )
    approval = await client.get_approval(asked.id)  # a replayed answer is the first one
    while not approval.is_decided:
        interrupt(
            {
                APPROVAL_INTERRUPT: approval.id,
                "shard_id": shard_id,
                "expected_version": expected_version,
                "description": description,
            }
        )
        approval = await client.get_approval(approval.id)
    if approval.server_status in ("approved", "approved_stale"):
        # Approved but not applied by the decision (a rule failed then): the
        # commit carrying approval_id is the one use the server allows.
        # A refusal (stale, already used, a rule) leaves the approval saying why.
        with contextlib.suppress(ZeroLockError):
            await client.commit(
                shard_id, expected_version, proposed_value, approval_id=approval.id, minimal=True
            )
        approval = await client.get_approval(approval.id)
    return approval


def pending_approvals(state: Any) -> dict[str, str]:
    """The ZeroLock approvals a paused graph waits on, from ``graph.get_state``:
    ``{interrupt id: approval id}``."""
    return {
        pause.id: pause.value[APPROVAL_INTERRUPT]
        for pause in getattr(state, "interrupts", ())
        if isinstance(pause.value, dict) and APPROVAL_INTERRUPT in pause.value
    }


async def resume_when_decided(
    graph: Any,
    config: RunnableConfig,
    approvals: ApprovalClient,
    *,
    timeout_seconds: float = 3600,
    poll_seconds: float = 5.0,
) -> Any:
    """Waits on ZeroLock for each approval the thread is paused on (the
    ``approval_decided`` push, polling as the fallback), then resumes the graph
    with ``Command(resume={interrupt id: decided approval})`` and returns what
    ``ainvoke`` returns. A thread paused on none is not resumed (None). Raises
    ``TimeoutError`` if one is still pending after ``timeout_seconds``."""
    waiting = pending_approvals(await graph.aget_state(config))
    if not waiting:
        return None
    decided = {}
    for interrupt_id, approval_id in waiting.items():
        approval = await approvals.wait_for_approval(
            approval_id, timeout_seconds=timeout_seconds, poll_seconds=poll_seconds
        )
        decided[interrupt_id] = approval.raw
    return await graph.ainvoke(Command(resume=decided), config)


def create_zerolock_tools(client: ZeroLockClient) -> list[StructuredTool]:
    """read_shard, commit_shard and claim_task as LangGraph/LangChain tools. Answers
    are JSON strings a model can read; a lost race is an answer, not an exception."""

    async def read_shard(shard_id: str) -> str:
        """Read a shard: its value and the version to commit against."""
        shard = await client.get_shard(shard_id)
        return json.dumps({"shard_id": shard.id, "version": shard.version, "value": shard.value})

    async def commit_shard(shard_id: str, expected_version: int, new_value_json: str) -> str:
        """Commit a new value (JSON) to a decision shard, given the version you read."""
        try:
            result = await client.commit(
                shard_id, expected_version, json.loads(new_value_json), minimal=True
            )
        except StaleCommitError as stale:
            return json.dumps(
                {
                    "committed": False,
                    "error": stale.code,
                    "current_version": stale.current_version,
                    "current_value": stale.current_value,
                }
            )
        return json.dumps({"committed": True, "version": result.version})

    async def claim(shard_id: str, task_id: str | None = None) -> str:
        """Claim a task in a task-queue shard. Without task_id the server picks a
        pending one for you (task_id null: nothing left to claim); with task_id,
        that task, and if you lost, who holds it."""
        if task_id is None:
            return claim_tool_answer(None, await claim_next(client, shard_id))
        return claim_tool_answer(task_id, await claim_task(client, shard_id, task_id))

    return [
        StructuredTool.from_function(
            coroutine=read_shard, name="read_shard", description=read_shard.__doc__
        ),
        StructuredTool.from_function(
            coroutine=commit_shard, name="commit_shard", description=commit_shard.__doc__
        ),
        StructuredTool.from_function(coroutine=claim, name="claim_task", description=claim.__doc__),
    ]
