"""LangGraph on ZeroLock (``pip install zerolock[langgraph]``).

``ZeroLockSaver`` keeps a graph's checkpoints in shards, so several workers can
resume one thread and every step is audited; ``create_zerolock_tools`` gives an
agent read, commit and claim as tools.

Layout: one decision shard per (thread, namespace), id ``lg.<hash>``, value
``{"thread_id", "checkpoint_ns", "checkpoints": {id: {...}}, "writes": {id:
{task_id:idx: [...]}}}``. Serialized parts are the saver's own ``serde`` output,
base64-encoded. Every write is one ``/api/txn`` put at a path: no read-modify-
write, so concurrent writers of one thread never lose each other's writes."""

from __future__ import annotations

import asyncio
import base64
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

from .client import ZeroLockClient
from .errors import ConflictError, NotFoundError, StaleCommitError
from .models import CreateShardOptions
from .task_claim import claim_next, claim_task, claim_tool_answer


def thread_shard_id(thread_id: str, checkpoint_ns: str) -> str:
    digest = hashlib.sha256(f"{thread_id}\x00{checkpoint_ns}".encode()).hexdigest()[:32]
    return f"lg.{digest}"


def _pack(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode()]


def _unpack(packed: list[str]) -> tuple[str, bytes]:
    return packed[0], base64.b64decode(packed[1])


class ZeroLockSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose storage is ZeroLock shards."""

    def __init__(self, base_url: str, *, api_key: str, agent_id: str = "langgraph", **kwargs: Any):
        super().__init__(**kwargs)
        self._api_key, self._agent_id = api_key, agent_id
        self._base_url = base_url
        self._clients: dict[int, ZeroLockClient] = {}
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

    def _sync(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    # --- storage ----------------------------------------------------------------

    async def _thread_value(self, thread_id: str, ns: str) -> dict[str, Any] | None:
        try:
            return (await self._client().get_shard(thread_shard_id(thread_id, ns))).value
        except NotFoundError:
            return None

    async def _ensure(self, thread_id: str, ns: str) -> str:
        shard_id = thread_shard_id(thread_id, ns)
        initial = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoints": {}, "writes": {}}
        try:
            await self._client().create_shard(shard_id, CreateShardOptions(initial_value=initial))
        except ConflictError as exists:
            if exists.code != "SHARD_EXISTS":
                raise
        return shard_id

    def _tuple(self, value: dict[str, Any], checkpoint_id: str) -> CheckpointTuple:
        thread_id, ns = value["thread_id"], value["checkpoint_ns"]
        saved = value["checkpoints"][checkpoint_id]
        writes = value.get("writes", {}).get(checkpoint_id, {})
        pending = [
            (w[0], w[1], self.serde.loads_typed(_unpack(w[2:4])))
            for _, w in sorted(
                writes.items(), key=lambda kv: (kv[1][0], int(kv[0].rsplit(":", 1)[1]))
            )
        ]
        parent = saved.get("parent")
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint=self.serde.loads_typed(_unpack(saved["checkpoint"])),
            metadata=self.serde.loads_typed(_unpack(saved["metadata"])),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=pending,
        )

    # --- the async interface ------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        value = await self._thread_value(
            configurable["thread_id"], configurable.get("checkpoint_ns", "")
        )
        if not value or not value["checkpoints"]:
            return None
        checkpoint_id = get_checkpoint_id(config) or max(value["checkpoints"])
        if checkpoint_id not in value["checkpoints"]:
            return None
        return self._tuple(value, checkpoint_id)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if config is None:
            return
        configurable = config["configurable"]
        value = await self._thread_value(
            configurable["thread_id"], configurable.get("checkpoint_ns", "")
        )
        if not value:
            return
        wanted = get_checkpoint_id(config)
        below = get_checkpoint_id(before) if before else None
        count = 0
        for checkpoint_id in sorted(value["checkpoints"], reverse=True):
            if (wanted and checkpoint_id != wanted) or (below and checkpoint_id >= below):
                continue
            found = self._tuple(value, checkpoint_id)
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
        shard_id = await self._ensure(thread_id, ns)
        saved = {
            "checkpoint": _pack(self.serde.dumps_typed(checkpoint)),
            "metadata": _pack(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
            "parent": configurable.get("checkpoint_id"),
        }
        await self._client().txn(
            success=[
                {
                    "op": "put",
                    "shard_id": shard_id,
                    "path": ["checkpoints", checkpoint["id"]],
                    "value": saved,
                }
            ],
            minimal=True,
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        checkpoint_id = configurable["checkpoint_id"]
        shard_id = await self._ensure(thread_id, ns)
        ops = []
        for index, (channel, value) in enumerate(writes):
            inner = f"{task_id}:{WRITES_IDX_MAP.get(channel, index)}"
            ops.append(
                {
                    "op": "put",
                    "shard_id": shard_id,
                    "path": ["writes", checkpoint_id, inner],
                    "value": [task_id, channel, *_pack(self.serde.dumps_typed(value)), task_path],
                }
            )
        if ops:
            await self._client().txn(success=ops, minimal=True)

    async def adelete_thread(self, thread_id: str) -> None:
        for shard in await self._client().list_shards(prefix="lg."):
            if shard.value.get("thread_id") == thread_id:
                await self._client().delete_shard(shard.id)

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

    def get_next_version(self, current: str | None, channel: None) -> str:
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}"


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
