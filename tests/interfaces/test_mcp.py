"""The MCP tools in process (the SDK's client on the server object, fake embedder)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_helpers import TOOLS, ok, refused, session, text

import recalld
from recalld.config import Settings
from recalld.interfaces.mcp import Engines, build_server
from recalld.serialize import to_json


def settings_for(db: Path, tenant: str = "default") -> Settings:
    return Settings(db=db, cache_dir=None, embedder="fake", tenant=tenant)


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Engines]:
    pool = Engines(settings_for(tmp_path / "memory.db"))
    yield pool
    pool.close()


@pytest.fixture
def server(engines: Engines) -> Any:
    return build_server(lambda ctx: engines.get())


def calls(server: Any, *steps: tuple[str, dict[str, Any]]) -> list[Any]:
    """Call the tools in order in one session; their results."""

    async def run(client: Client) -> list[Any]:
        return [await client.call_tool(name, args) for name, args in steps]

    return session(server, run)


def snapshot(engine: recalld.MemoryEngine) -> Any:
    return to_json(engine.list(limit=1000, include_forgotten=True))


def test_tools_have_schemas_and_descriptions_for_the_model(server: Any) -> None:
    async def run(client: Client) -> Any:
        return (await client.list_tools()).tools

    tools = {t.name: t for t in session(server, run)}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert len(tool.description or "") > 40, tool.name
        assert tool.input_schema["type"] == "object"
    search = tools["memory_search"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["limit"]["type"] == "integer"
    assert search["properties"]["explain"]["type"] == "boolean"
    filters = search["$defs"]["Filters"]["properties"]
    assert {"project", "scope", "types", "tags", "session_id", "since", "until"} <= set(filters)
    assert tools["memory_add"].input_schema["properties"]["type"]["enum"] == [
        "insight", "event", "raw", "turn", "chunk",  # and the names people give them:
        "fact", "preference", "decision", "lesson", "episode", "message", "document",
        "log"]  # fmt: skip
    assert tools["memory_search"].annotations.read_only_hint is True
    assert tools["memory_forget"].annotations.destructive_hint is True


def test_every_tool_round_trip(server: Any, engines: Engines) -> None:
    added = calls(
        server,
        (
            "memory_add",
            {
                "content": "The deploy key is in the vault",
                "tags": ["ops"],
                "project": "infra",
                "type": "insight",
            },
        ),  # fmt: skip
        ("memory_add", {"content": "Lunch was a sandwich with cheese"}),
        (
            "memory_add",
            {"content": "The deploy key is in the vault", "tags": ["ops"], "project": "infra"},
        ),  # fmt: skip
    )
    key, lunch, again = (ok(r) for r in added)
    assert text(added[0]) == f"stored {key['id']}" and key["created"] is True
    assert again == {**again, "created": False, "duplicate_of": key["id"]}
    assert text(added[2]) == f"not stored: identical to existing memory {key['id']}"

    found, context, got = calls(
        server,
        (
            "memory_search",
            {
                "query": "deploy key vault",
                "limit": 2,
                "explain": True,
                "filters": {"project": "infra", "tags": ["ops"]},
            },
        ),  # fmt: skip
        ("memory_context", {"query": "deploy key", "max_tokens": 100}),
        ("memory_get", {"id": lunch["id"]}),
    )
    hits = ok(found)["hits"]
    assert [h["memory"]["id"] for h in hits] == [key["id"]]
    assert hits[0]["trace"]["final_score"] == pytest.approx(hits[0]["score"])
    shown = text(found)
    assert f"1. id {key['id']} | score {hits[0]['score']:.4f}" in shown
    assert "project infra" in shown and "tags ops" in shown and "why: channels" in shown
    assert text(context).startswith("[Memory Context]\n- The deploy key is in the vault")
    assert key["id"] in text(context) and ok(context)["budget"] == 100
    assert ok(got)["content"] == "Lunch was a sandwich with cheese"
    assert text(got).startswith(f"id {lunch['id']} | ")

    updated, forgot, status, after = calls(
        server,
        ("memory_update", {"id": lunch["id"], "content": "Lunch was soup", "tags": ["food"]}),
        ("memory_forget", {"ids": [key["id"]]}),
        ("memory_status", {}),
        ("memory_search", {"query": "deploy key vault"}),
    )
    assert ok(updated)["content"] == "Lunch was soup" and ok(updated)["tags"] == ["food"]
    assert text(updated).startswith(f"updated id {lunch['id']}")
    assert ok(forgot) == {"forgotten": 1, "hard": False}
    assert text(forgot) == f"forgot 1 memory: {key['id']}"
    assert ok(status)["store"]["memories"] == 1 and ok(status)["store"]["forgotten"] == 1
    assert text(status).startswith("1 memory (")
    assert key["id"] not in [h["memory"]["id"] for h in ok(after)["hits"]]
    assert engines.get().get(lunch["id"]).content == "Lunch was soup"


Library = Callable[[recalld.MemoryEngine, str], Any]
BAD_INPUT: list[tuple[str, dict[str, Any], Library]] = [
    ("memory_search", {"query": "   "}, lambda e, i: e.search("   ")),
    ("memory_search", {"query": "x", "limit": 0}, lambda e, i: e.search("x", limit=0)),
    ("memory_search", {"query": "x", "limit": 1001}, lambda e, i: e.search("x", limit=1001)),
    (
        "memory_search",
        {"query": "x", "filters": {"types": ["opinion"]}},
        lambda e, i: e.search("x", types=["opinion"]),
    ),  # fmt: skip
    ("memory_context", {"query": "x", "max_tokens": 0}, lambda e, i: e.context("x", max_tokens=0)),
    ("memory_context", {"query": ""}, lambda e, i: e.context("")),
    ("memory_add", {"content": "  \n "}, lambda e, i: e.add("  \n ")),
    ("memory_add", {"content": "x" * 100_001}, lambda e, i: e.add("x" * 100_001)),
    ("memory_get", {"id": "nope"}, lambda e, i: e.get("nope")),
    (
        "memory_update",
        {"id": "nope", "content": "new"},
        lambda e, i: e.update("nope", content="new"),
    ),
    ("memory_update", {"id": "{id}", "content": " "}, lambda e, i: e.update(i, content=" ")),
    ("memory_forget", {"ids": ["{id}", "nope"]}, lambda e, i: e.forget([i, "nope"])),
    (
        "memory_forget",
        {"ids": ["{id}", "nope"], "hard": True},
        lambda e, i: e.forget([i, "nope"], hard=True),
    ),  # fmt: skip
]


def _fill(args: dict[str, Any], memory_id: str) -> dict[str, Any]:
    def one(value: Any) -> Any:
        if isinstance(value, list):
            return [one(v) for v in value]
        return memory_id if value == "{id}" else value

    return {k: one(v) for k, v in args.items()}


@pytest.mark.parametrize(("tool", "args", "library"), BAD_INPUT,
                         ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(BAD_INPUT)])  # fmt: skip
def test_bad_input_is_a_tool_error_with_the_library_message_and_changes_nothing(
    server: Any, engines: Engines, tool: str, args: dict[str, Any], library: Library
) -> None:
    engine = engines.get()
    memory_id = engine.add("an existing memory").id
    before = snapshot(engine)
    with pytest.raises(recalld.RecalldError) as expected:
        library(engine, memory_id)
    (result,) = calls(server, (tool, _fill(args, memory_id)))
    assert refused(result) == str(expected.value)
    assert snapshot(engine) == before


@pytest.mark.parametrize(
    ("tool", "args", "needle"),
    [
        ("memory_search", {"query": "x", "limit": "many"}, "limit"),
        ("memory_search", {"query": "x", "filters": {"since": "last tuesday"}}, "filters.since"),
        ("memory_search", {"query": "x", "as_of": "soon"}, "as_of"),
        ("memory_search", {"query": "x", "filters": {"colour": "red"}}, "colour"),
        ("memory_add", {"content": "x", "type": "opinion"}, "type"),
        ("memory_add", {"content": "x", "event_time": "soon"}, "event_time"),
        ("memory_add", {}, "content"),
        ("memory_update", {"id": "{id}", "tags": "ops"}, "tags"),
        ("memory_forget", {"ids": "{id}"}, "ids"),
        ("no_such_tool", {}, "no_such_tool"),
    ],
)
def test_malformed_arguments_are_refused_and_change_nothing(
    server: Any, engines: Engines, tool: str, args: dict[str, Any], needle: str
) -> None:
    engine = engines.get()
    memory_id = engine.add("an existing memory").id
    before = snapshot(engine)
    (result,) = calls(server, (tool, _fill(args, memory_id)))
    assert result.is_error and needle in text(result)
    assert snapshot(engine) == before


def test_two_tenants_cannot_see_each_others_ids(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    alice_pool, bob_pool = Engines(settings_for(db, "alice")), Engines(settings_for(db, "bob"))
    alice = build_server(lambda ctx: alice_pool.get())
    bob = build_server(lambda ctx: bob_pool.get())
    try:
        (added,) = calls(alice, ("memory_add", {"content": "alice's locker code is 4711"}))
        secret = ok(added)["id"]
        before = snapshot(alice_pool.get())
        unknown = f"unknown id: no memory with id {secret}"
        results = calls(
            bob,
            ("memory_get", {"id": secret}),
            ("memory_update", {"id": secret, "content": "bob was here"}),
            ("memory_forget", {"ids": [secret]}),
            ("memory_forget", {"ids": [secret], "hard": True}),
        )
        assert [refused(r) for r in results] == [unknown] * 4
        search, context, status = calls(
            bob,
            ("memory_search", {"query": "locker code 4711"}),
            ("memory_context", {"query": "locker code"}),
            ("memory_status", {}),
        )
        assert ok(search)["hits"] == [] and secret not in text(search)
        assert ok(context)["hits"] == [] and "4711" not in text(context)
        assert ok(status)["store"]["memories"] == 0
        assert snapshot(alice_pool.get()) == before
        (mine,) = calls(alice, ("memory_search", {"query": "locker code 4711"}))
        assert [h["memory"]["id"] for h in ok(mine)["hits"]] == [secret]
    finally:
        alice_pool.close()
        bob_pool.close()


def test_one_embedder_for_every_tenant(tmp_path: Path) -> None:
    pool = Engines(settings_for(tmp_path / "m.db"))
    try:
        first, second = pool.get("alice"), pool.get("bob")
        assert first is not second and pool.get("alice") is first
        assert first.embedder is second.embedder is pool.embedder()
    finally:
        pool.close()
