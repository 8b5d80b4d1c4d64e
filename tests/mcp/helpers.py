"""An MCP client on the live server: the official SDK's, over real sockets."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def mcp_session(
    url: str, key: str | None, agent_id: str | None = None, *, bearer: bool = False
) -> AsyncIterator[Client]:
    headers: dict[str, str] = {}
    if key is not None:
        headers["Authorization" if bearer else "X-API-Key"] = f"Bearer {key}" if bearer else key
    if agent_id:
        headers["X-Agent-Id"] = agent_id
    async with (
        httpx2.AsyncClient(headers=headers, timeout=70) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


def answer_of(result: Any) -> Any:
    """A tool result's structured content, checked against its text block."""
    assert result.content and result.content[0].type == "text"
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def error_of(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    return answer_of(result)["error"]
