"""Dates at and beyond the calendar's ends, through every door (library, CLI, HTTP, MCP):
a query naming one is searched (no window), a date field out of range is a clear refusal
that names the field and the range, and nothing crashes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp import Client
from mcp_helpers import ok, refused, session

import recalld
from recalld.config import Settings
from recalld.errors import InvalidInputError
from recalld.interfaces.cli import cli
from recalld.interfaces.mcp import Engines, build_server
from recalld.requests import EARLIEST, LATEST

QUERIES = ["what did I do in december 9999", "3000000 years ago", "999999999 days ago",
           "january 1 0001", "christmas 9999", "9999 years ago"]  # fmt: skip
"""Ordinary words naming a time the calendar cannot hold."""
OUT_OF_RANGE = ["9999-12-31T23:59:59", "0001-01-01", "0001-01-01T00:00:00+01:00",
                "9998-12-31T23:00:00-14:00"]  # fmt: skip
"""Date fields beyond :data:`EARLIEST`/:data:`LATEST` (the last two only once in UTC)."""
REFUSAL = f"must lie between {EARLIEST.date()} and {LATEST.date()}"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    settings = Settings(db=tmp_path / "memory.db", cache_dir=None, embedder="fake")
    with recalld.open(settings=settings) as engine:
        engine.add("went skiing in december with the whole team")
        engine.add("the oldest note", event_time=EARLIEST)
        engine.add("the newest note", event_time=LATEST)
    return settings


def test_the_library(settings: Settings) -> None:
    with recalld.open(settings=settings) as engine:
        for query in QUERIES:
            assert engine.search(query, mode="hybrid").hits
            assert engine.search(query, as_of=LATEST).hits
            assert engine.search(query, as_of=EARLIEST).hits
            assert engine.context(query).text
        before = engine.status().store.memories
        for value in OUT_OF_RANGE:
            moment = datetime.fromisoformat(value)
            for kwargs in ({"as_of": moment}, {"since": moment}, {"until": moment}):
                with pytest.raises(InvalidInputError, match=REFUSAL):
                    engine.search("skiing", **kwargs)  # type: ignore[arg-type]
            with pytest.raises(InvalidInputError, match=f"event_time {REFUSAL}"):
                engine.add("out of time", event_time=moment)
        assert engine.status().store.memories == before


def _cli(settings: Settings, *argv: str) -> Any:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECALLD_")}
    return CliRunner().invoke(cli, ["--db", str(settings.db), "--embedder", "fake", *argv],
                              env=env)  # fmt: skip


def test_the_cli(settings: Settings) -> None:
    for query in QUERIES:
        done = _cli(settings, "search", query, "--json")
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["hits"]
    for value in OUT_OF_RANGE:
        for option in ("--as-of", "--since", "--until"):
            done = _cli(settings, "search", "skiing", option, value)
            assert done.exit_code != 0 and isinstance(done.exception, SystemExit), done.output
            assert REFUSAL in done.output
        done = _cli(settings, "add", "out of time", "--event-time", value)
        assert done.exit_code != 0 and f"event_time {REFUSAL}" in done.output


@pytest.fixture
def http(settings: Settings) -> Iterator[Any]:
    from starlette.testclient import TestClient

    from recalld.interfaces.http import create_app

    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        yield client


def test_http(http: Any) -> None:
    for query in QUERIES:
        answer = http.post("/v1/search", json={"query": query})
        assert answer.status_code == 200 and answer.json()["hits"], answer.text
        assert http.post("/v1/context", json={"query": query}).status_code == 200
    for value in OUT_OF_RANGE:
        for body in ({"as_of": value}, {"filters": {"since": value}},
                     {"filters": {"until": value}}):  # fmt: skip
            answer = http.post("/v1/search", json={"query": "skiing", **body})
            assert answer.status_code == 422 and REFUSAL in answer.json()["error"]["message"]
        added = http.post("/v1/memories", json={"content": "out of time", "event_time": value})
        assert added.status_code == 422 and REFUSAL in added.json()["error"]["message"]


def test_mcp(settings: Settings) -> None:
    pool = Engines(settings)

    async def run(client: Client) -> None:
        for query in QUERIES:
            assert ok(await client.call_tool("memory_search", {"query": query}))["hits"]
        for value in OUT_OF_RANGE:
            for args in ({"as_of": value}, {"filters": {"since": value}},
                         {"filters": {"until": value}}):  # fmt: skip
                found = await client.call_tool("memory_search", {"query": "skiing", **args})
                assert REFUSAL in refused(found)
            late = {"content": "out of time", "event_time": value}
            added = await client.call_tool("memory_add", late)
            assert REFUSAL in refused(added)

    try:
        session(build_server(lambda ctx: pool.get()), run)
    finally:
        pool.close()
