"""Drive an MCP server with the SDK's own client from synchronous tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
from mcp import Client
from mcp.types import CallToolResult

T = TypeVar("T")
TOOLS = {"memory_search", "memory_context", "memory_add", "memory_get", "memory_update",
         "memory_forget", "memory_status", "memory_supersede", "memory_list",
         "memory_get_files"}  # fmt: skip


def session(target: Any, steps: Callable[[Client], Awaitable[T]], **options: Any) -> T:
    """Open one client session on ``target`` (a server, URL or stdio parameters), run
    ``steps`` in it and return what they return."""

    async def main() -> T:
        async with Client(target, **options) as client:
            return await steps(client)

    return anyio.run(main)


def text(result: CallToolResult) -> str:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.content[0].text


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured content of a successful call."""
    assert not result.is_error, text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def refused(result: CallToolResult) -> str:
    """The message of a tool error (bad input, unknown id)."""
    assert result.is_error, result
    assert result.structured_content is None
    return text(result)


@asynccontextmanager
async def with_key(url: str, key: str) -> AsyncIterator[Any]:
    """A streamable HTTP transport sending ``Authorization: Bearer key``."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams
