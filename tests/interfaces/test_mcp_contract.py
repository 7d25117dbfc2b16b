"""The MCP tools describe themselves strictly and truly: titles, plain descriptions, every
argument described, no argument beyond the schema (refused as the HTTP API refuses an
unknown field), bounds and date formats that match what is accepted, server instructions,
and answers that stay within a client's tool-output limit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_helpers import TOOLS, ok, refused, session, text

from recalld.config import Settings
from recalld.interfaces.mcp import MAX_OUTPUT_CHARS, Engines, build_server
from recalld.providers.embedders import FakeEmbedder
from recalld.requests import ISO_MOMENT as ISO


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Engines]:
    engines = Engines(Settings(db=tmp_path / "memory.db", cache_dir=None, embedder="fake"),
                      FakeEmbedder())  # fmt: skip
    yield engines
    engines.close()


def listing(pool: Engines) -> tuple[list[Any], str | None]:
    server = build_server(lambda ctx: pool.get())

    async def run(client: Client) -> list[Any]:
        return list((await client.list_tools()).tools)

    return session(server, run), server.instructions


def properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of a tool's schema, the nested models' (``$defs``) included."""
    yield from schema.get("properties", {}).items()
    for model in schema.get("$defs", {}).values():
        yield from properties(model)


def test_tools_have_titles_plain_descriptions_and_strict_described_schemas(
    pool: Engines,
) -> None:
    tools, instructions = listing(pool)
    assert {t.name for t in tools} == TOOLS
    assert instructions and "memory_search" in instructions and "memory_supersede" in instructions
    for tool in tools:
        assert tool.title and tool.title[0].isupper(), tool.name
        lines = (tool.description or "").splitlines()
        assert lines and not any(line.startswith(" ") for line in lines), tool.description
        schema = tool.input_schema
        assert schema.get("additionalProperties") is False, tool.name
        for name, spec in properties(schema):
            assert spec.get("description"), f"{tool.name}: {name} is not described"


def test_bounds_and_dates_are_declared_as_accepted(pool: Engines) -> None:
    tools = {t.name: t.input_schema for t in listing(pool)[0]}
    search = tools["memory_search"]["properties"]
    assert (search["limit"]["minimum"], search["limit"]["maximum"]) == (1, 1000)
    assert search["query"]["maxLength"] == 10_000 and search["query"]["minLength"] == 1
    assert search["as_of"]["anyOf"][0] == ISO
    assert tools["memory_add"]["properties"]["event_time"]["anyOf"][0] == ISO
    assert tools["memory_supersede"]["properties"]["until"]["anyOf"][0] == ISO
    listed = tools["memory_list"]["properties"]
    assert (listed["limit"]["minimum"], listed["limit"]["maximum"]) == (1, 1000)

    async def run(client: Client) -> list[Any]:
        return [await client.call_tool("memory_add", {"content": "dated", "event_time": when})
                for when in ("2024-03-14", "2024-03-14T09:30:00", "2024-03-14T09:30:00+02:00",
                             "soon", 1700000000)]  # fmt: skip

    *accepted, word, number = session(build_server(lambda ctx: pool.get()), run)
    assert all(not r.is_error for r in accepted)
    expected = "event_time: expected an ISO date or datetime such as 2024-03-14 or 2024-03-14T09:30"
    assert refused(word) == refused(number) == expected


def test_an_unknown_argument_is_refused_and_changes_nothing(pool: Engines) -> None:
    async def run(client: Client) -> list[Any]:
        return [await client.call_tool("memory_add", {"content": "x", "colour": "red"}),
                await client.call_tool("memory_search", {"query": "x", "top_k": 3}),
                await client.call_tool("memory_status", {})]  # fmt: skip

    added, searched, status = session(build_server(lambda ctx: pool.get()), run)
    assert refused(added) == "unknown field colour"
    assert refused(searched) == "unknown field top_k"
    assert ok(status)["store"]["memories"] == 0


def test_answers_stay_within_the_tool_output_limit(pool: Engines) -> None:
    engine = pool.get()
    long = [engine.add(f"note {i}: " + "the quarterly plan says many things. " * 540).id
            for i in range(25)]  # fmt: skip
    huge = engine.add("a very long document. " * 4_500).id  # ~100,000 characters

    async def run(client: Client) -> list[Any]:
        return [await client.call_tool("memory_list", {"limit": 25}),
                await client.call_tool("memory_search", {"query": "quarterly plan",
                                                         "limit": 25}),
                await client.call_tool("memory_get", {"id": huge}),
                await client.call_tool("memory_get", {"id": long[0]})]  # fmt: skip

    listed, searched, got_huge, got_one = session(build_server(lambda ctx: pool.get()), run)
    for result in (listed, searched, got_huge):
        size = len(text(result)) + len(json.dumps(ok(result), ensure_ascii=False))
        assert size <= MAX_OUTPUT_CHARS, size
        assert "tool-output limit" in text(result) and "note" in ok(result)
    shown = ok(listed)["memories"]
    assert 0 < len(shown) < 25 and f"{len(shown)} of 25 memories shown" in text(listed)
    assert [m["id"] for m in shown] == [m.id for m in engine.list(limit=len(shown))]
    # an answer that fits is whole
    assert ok(got_one)["content"] == engine.get(long[0]).content and "note" not in ok(got_one)
