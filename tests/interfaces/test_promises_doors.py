"""The user's promises through every door, on a real SQLite store with the packaged model.

After ``supersede LISBON --by PORTO``, "where do I live?" ranks Porto above Lisbon in the
library, the CLI, HTTP and MCP (the replaced memory's own evidence is more than twice its
replacement's there: a factor of 0.5 left it first); every context block marks the Lisbon line
with what replaced it; and a forgotten memory appears in none of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp import Client
from mcp_helpers import ok, session, text

import recalld
from recalld.config import Settings
from recalld.interfaces.cli import cli
from recalld.interfaces.mcp import Engines, build_server
from recalld.providers.embedders import Embedder
from recalld.serialize import to_json

LOCAL = "http://127.0.0.1"
QUESTION = "where do I live?"
LISBON = "I live in Lisbon, in the Alfama district."
PORTO = "I moved from Lisbon to Porto last month."
FORGOTTEN = "I live above the bakery; the door code is 4711."
OTHERS = ["My sister plays the cello in an orchestra.", "The car needs new tyres before winter."]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, local_embedder: Embedder) -> Settings:
    folder = tmp_path_factory.mktemp("promises")
    chosen = Settings(db=folder / "memory.db", cache_dir=None, embedder="local")
    with recalld.open(settings=chosen, embedder=local_embedder) as engine:
        lisbon = engine.add(LISBON).id
        for text in OTHERS:
            engine.add(text)
        porto = engine.add(PORTO).id
        engine.supersede(lisbon, by=porto)
        engine.forget(engine.add(FORGOTTEN).id)
    return chosen


def contents(hits: list[dict[str, Any]]) -> list[str]:
    return [h["memory"]["content"] for h in hits]


def check_search(hits: list[dict[str, Any]]) -> None:
    found = contents(hits)
    assert found[0] == PORTO, found
    assert LISBON in found and FORGOTTEN not in found
    lisbon = hits[found.index(LISBON)]
    if lisbon["trace"] is not None:
        assert any("replaced by" in p for p in lisbon["trace"]["promises"])


def check_context(block: dict[str, Any]) -> None:
    text = block["text"]
    lines = text.splitlines()
    lisbon = next(line for line in lines if LISBON in line)
    assert "[replaced on " in lisbon and f'by: "{PORTO}"]' in lisbon, text
    assert lines.index(lisbon) > next(i for i, line in enumerate(lines) if line.endswith(PORTO))
    assert FORGOTTEN not in text and "4711" not in text


def test_the_library(store: Settings, local_embedder: Embedder) -> None:
    with recalld.open(settings=store, embedder=local_embedder) as engine:
        check_search(to_json(engine.search(QUESTION, explain=True))["hits"])
        check_context(to_json(engine.context(QUESTION, max_tokens=500)))


def cli_json(store: Settings, *args: str, tmp_path: Path) -> Any:
    config = tmp_path / "empty.toml"
    config.write_text("", encoding="utf-8")
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECALLD_")}
    env["RECALLD_CONFIG"] = str(config)
    argv = ["--db", str(store.db), "--embedder", "local", *args, "--json"]
    done = CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_the_cli(store: Settings, tmp_path: Path) -> None:
    check_search(cli_json(store, "search", QUESTION, "--explain", tmp_path=tmp_path)["hits"])
    check_context(cli_json(store, "search", QUESTION, "--context", "500", tmp_path=tmp_path))


@pytest.fixture(scope="module")
def http(store: Settings) -> Iterator[Any]:
    from starlette.testclient import TestClient

    from recalld.interfaces.http import create_app

    with TestClient(create_app(store), base_url=LOCAL) as client:
        yield client


def test_http(http: Any) -> None:
    answer = http.post("/v1/search", json={"query": QUESTION, "explain": True})
    assert answer.status_code == 200, answer.text
    check_search(answer.json()["hits"])
    block = http.post("/v1/context", json={"query": QUESTION, "max_tokens": 500})
    assert block.status_code == 200, block.text
    check_context(block.json())


def test_mcp(store: Settings) -> None:
    pool = Engines(store)
    server = build_server(lambda ctx: pool.get())

    async def run(client: Client) -> tuple[dict[str, Any], dict[str, Any]]:
        called = await client.call_tool("memory_search", {"query": QUESTION, "explain": True})
        # The text the model reads says which memory is no longer current, and why it ranks so.
        said = text(called)
        assert "| superseded by " in said and "promises: replaced by" in said
        found = ok(called)
        block = ok(await client.call_tool("memory_context", {"query": QUESTION,
                                                             "max_tokens": 500}))  # fmt: skip
        return found, block

    try:
        found, block = session(server, run)
    finally:
        pool.close()
    check_search(found["hits"])
    check_context(block)
