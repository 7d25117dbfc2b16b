"""The MCP tools keep the request caps the HTTP API keeps: their schemas declare them, and an
answer over the answers' cap is refused with the HTTP API's message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_helpers import ok, refused, session

from recalld.config import Settings
from recalld.interfaces import mcp_answers
from recalld.interfaces.mcp import Engines, build_server
from recalld.request_limits import (
    MAX_CONTEXT_TOKENS,
    MAX_ID_CHARS,
    MAX_IDS,
    MAX_TAG_CHARS,
    MAX_TAGS,
)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Engines]:
    engines = Engines(Settings(db=tmp_path / "memory.db", cache_dir=None, embedder="fake"))
    yield engines
    engines.close()


def schemas(pool: Engines) -> dict[str, dict[str, Any]]:
    async def run(client: Client) -> list[Any]:
        return list((await client.list_tools()).tools)

    tools = session(build_server(lambda ctx: pool.get()), run)
    return {t.name: t.input_schema["properties"] for t in tools}


def test_tool_schemas_declare_the_request_caps(pool: Engines) -> None:
    tools = schemas(pool)
    assert tools["memory_context"]["max_tokens"]["maximum"] == MAX_CONTEXT_TOKENS
    ids = tools["memory_forget"]["ids"]
    assert ids["maxItems"] == MAX_IDS and ids["items"]["maxLength"] == MAX_ID_CHARS
    for tool in ("memory_add", "memory_update"):
        tags = tools[tool]["tags"]
        assert (tags["maxItems"], tags["items"]["maxLength"]) == (MAX_TAGS, MAX_TAG_CHARS)
        assert tools[tool]["project"]["maxLength"] == MAX_ID_CHARS
    assert tools["memory_add"]["session_id"]["maxLength"] == MAX_ID_CHARS
    for tool in ("memory_get", "memory_update", "memory_supersede"):
        assert tools[tool]["id"]["maxLength"] == MAX_ID_CHARS


def test_an_answer_over_the_cap_is_refused_as_over_http(
    pool: Engines, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = pool.get()
    for i in range(4):
        engine.add(f"note {i}: " + "a long line of the plan. " * 200)
    monkeypatch.setattr(mcp_answers, "MAX_RESPONSE_BYTES", 10_000)  # 4 notes of 5,000 chars

    async def run(client: Client) -> list[Any]:
        return [
            await client.call_tool("memory_list", {"limit": 4}),
            await client.call_tool("memory_list", {"limit": 1}),
        ]

    too_many, one = session(build_server(lambda ctx: pool.get()), run)
    message = refused(too_many)
    assert message.startswith("the answer would be ") and "over the limit of 10,000" in message
    assert message.endswith("ask for fewer hits or memories (limit)")
    assert len(ok(one)["memories"]) == 1
