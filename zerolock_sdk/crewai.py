"""CrewAI on ZeroLock (``pip install zerolock[crewai]``).

The seed gives every framework the same three primitives; here they are CrewAI
``BaseTool``s: ``read_shard``, ``commit_shard`` and ``claim_task``. Answers are
JSON strings an agent can read, and a lost race (a stale version, a task someone
else holds) is an answer, not an exception, so the crew can decide what next.

CrewAI calls tools synchronously, so the tools share one ``SyncZeroLockClient``
(its own event loop on a background thread); ``arun`` runs the same call in a
worker thread. URL and key default to ``$ZEROLOCK_URL`` and ``$ZEROLOCK_API_KEY``::

    tools = create_zerolock_tools(agent_id="researcher-1")
    Agent(role="researcher", goal="...", backstory="...", tools=tools)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from crewai.tools import BaseTool
from pydantic import BaseModel, Field

from .errors import StaleCommitError
from .sync import SyncZeroLockClient
from .task_claim import claim_next, claim_task, claim_tool_answer


class ReadShardArgs(BaseModel):
    shard_id: str = Field(description="The shard to read.")


class CommitShardArgs(BaseModel):
    shard_id: str = Field(description="The decision shard to write.")
    new_value: Any = Field(description="The whole new value (any JSON).")
    expected_version: int = Field(description="The version you read and based this on.")


class ClaimTaskArgs(BaseModel):
    shard_id: str = Field(description="The task-queue shard.")
    task_id: str | None = Field(
        default=None, description="The pending task to claim; leave out to get any pending one."
    )


class _ZeroLockTool(BaseTool):
    # Excluded from dumps: CrewAI serialises tools for its events and caches.
    client: SyncZeroLockClient = Field(exclude=True)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        # CrewAI 1.7+ checks the arguments against args_schema in run(); 1.6 (the
        # newest beside mcp 2.x) does not. Checked here, a call that does not fit
        # sends no request on either: pydantic's ValidationError is a ValueError.
        schema = self.args_schema
        if not args and isinstance(schema, type) and issubclass(schema, BaseModel):
            schema.model_validate(kwargs)
        return super().run(*args, **kwargs)

    async def _arun(self, **kwargs: Any) -> str:
        return await asyncio.to_thread(self._run, **kwargs)


class ReadShardTool(_ZeroLockTool):
    name: str = "read_shard"
    description: str = "Read a shared-state shard: its value and the version to commit against."
    args_schema: type[BaseModel] = ReadShardArgs

    def _run(self, shard_id: str) -> str:
        shard = self.client.get_shard(shard_id)
        return json.dumps({"shard_id": shard.id, "version": shard.version, "value": shard.value})


class CommitShardTool(_ZeroLockTool):
    name: str = "commit_shard"
    description: str = (
        "Commit a new value to a decision shard, given the version you read. If "
        "someone committed first you get committed=false with the current value "
        "and version: read it, decide again, and retry against that version."
    )
    args_schema: type[BaseModel] = CommitShardArgs

    def _run(self, shard_id: str, new_value: Any, expected_version: int) -> str:
        try:
            result = self.client.commit_shard(shard_id, new_value, expected_version, minimal=True)
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


class ClaimTaskTool(_ZeroLockTool):
    name: str = "claim_task"
    description: str = (
        "Claim a pending task in a task-queue shard: name task_id, or leave it out and "
        "the server picks a pending one (task_id null: nothing left). claimed=true "
        "means it is yours alone; otherwise holder says who has it: pick another task."
    )
    args_schema: type[BaseModel] = ClaimTaskArgs

    def _run(self, shard_id: str, task_id: str | None = None) -> str:
        if task_id is None:
            return claim_tool_answer(None, self.client.call(claim_next, shard_id))
        return claim_tool_answer(task_id, self.client.call(claim_task, shard_id, task_id))


def create_zerolock_tools(
    base_url: str | None = None,
    *,
    agent_id: str,
    api_key: str | None = None,
    client: SyncZeroLockClient | None = None,
) -> list[BaseTool]:
    """``read_shard``, ``commit_shard`` and ``claim_task`` for one CrewAI agent.
    Pass ``client`` to share one; otherwise one is made for ``agent_id`` (close it
    with ``tools[0].client.close()`` when the crew is done)."""
    client = client or SyncZeroLockClient(base_url, agent_id=agent_id, api_key=api_key)
    return [
        ReadShardTool(client=client),
        CommitShardTool(client=client),
        ClaimTaskTool(client=client),
    ]
