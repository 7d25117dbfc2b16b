"""The names people give kinds of memory: ``fact``, ``preference`` ... are accepted wherever
a type is (add, update, filters) in every door, and stored as the type they name, so a store
and its filters stay as they were; an unknown name is refused with what exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp import Client
from mcp_helpers import ok, session

import recalld
from recalld.config import Settings
from recalld.interfaces.cli import cli
from recalld.interfaces.mcp import Engines, build_server
from recalld.providers.embedders import FakeEmbedder
from recalld.records import MEMORY_TYPES, TYPE_ALIASES, TypeName

LOCAL = "http://127.0.0.1"


@pytest.fixture
def store(tmp_path: Path) -> Settings:
    return Settings(db=tmp_path / "memory.db", cache_dir=None, embedder="fake")


def test_the_names_are_the_types_and_their_aliases() -> None:
    from typing import get_args

    assert get_args(TypeName) == (*MEMORY_TYPES, *TYPE_ALIASES)
    assert set(TYPE_ALIASES.values()) <= set(MEMORY_TYPES)


def test_the_library(store: Settings) -> None:
    with recalld.open(settings=store, embedder=FakeEmbedder()) as engine:
        tea = engine.add("Prefers tea over coffee.", type="preference").id
        assert engine.get(tea).type == "insight"
        moved = engine.add("Moved to Porto.", type="fact").id
        assert engine.update(moved, type="log").type == "raw"
        assert [m.id for m in engine.list(types=["fact"])] == [tea]
        assert [h.memory.id for h in engine.search("tea", types=["preference"]).hits] == [tea]
        with pytest.raises(recalld.InvalidInputError, match="fact, preference") as refused:
            engine.add("x", type="opinion")
        assert "insight, event, raw, turn or chunk" in str(refused.value)
        with pytest.raises(recalld.InvalidInputError, match="unknown type.*opinion"):
            engine.search("tea", types=["opinion"])
        assert len(engine.list()) == 2  # the refused add stored nothing


def run(store: Settings, *argv: str) -> Any:
    done = CliRunner().invoke(cli, ["--db", str(store.db), "--embedder", "fake", *argv],
                              catch_exceptions=False)  # fmt: skip
    return done


def test_the_cli(store: Settings) -> None:
    added = run(store, "--json", "add", "Prefers tea over coffee.", "--type", "preference")
    assert added.exit_code == 0, added.output
    listed = run(store, "--json", "list", "--type", "fact")
    assert [m["type"] for m in json.loads(listed.stdout)] == ["insight"]
    found = run(store, "--json", "search", "tea", "--type", "preference")
    assert len(json.loads(found.stdout)["hits"]) == 1
    refused = run(store, "add", "x", "--type", "opinion")
    assert refused.exit_code == 2 and "preference" in refused.output
    helped = run(store, "add", "--help")
    assert "fact, preference, decision and lesson are stored as insight" in " ".join(
        helped.output.split())  # fmt: skip


def test_http(store: Settings) -> None:
    from starlette.testclient import TestClient

    from recalld.interfaces.http import create_app

    with TestClient(create_app(store), base_url=LOCAL) as client:
        made = client.post("/v1/memories", json={"content": "Tea, not coffee.", "type": "fact"})
        assert made.status_code == 201, made.text
        got = client.get(f"/v1/memories/{made.json()['id']}").json()
        assert got["type"] == "insight"
        listed = client.get("/v1/memories", params={"type": "preference"}).json()
        assert [m["id"] for m in listed["memories"]] == [got["id"]]
        bad = client.post("/v1/memories", json={"content": "x", "type": "opinion"})
        assert bad.status_code == 422 and "fact, preference" in bad.text


def test_mcp(store: Settings) -> None:
    pool = Engines(store)
    server = build_server(lambda ctx: pool.get())

    async def steps(client: Client) -> tuple[Any, Any]:
        made = ok(await client.call_tool("memory_add", {"content": "Tea, not coffee.",
                                                        "type": "preference"}))  # fmt: skip
        got = ok(await client.call_tool("memory_get", {"id": made["id"]}))
        return made, got

    try:
        _, got = session(server, steps)
    finally:
        pool.close()
    assert got["type"] == "insight"
