"""One truth through every door: the library, the CLI (``--json``), MCP (structured content)
and HTTP give the same ids, order, scores and traces for the same searches."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from datetime import datetime
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
from recalld.io import read_memories_jsonl
from recalld.serialize import to_json

FIXTURES = Path(__file__).parent.parent / "fixtures"
AS_OF = "2026-04-20T09:00:00+00:00"
"""A fixed reference time: recency adjustments must not move between two calls."""

SEARCHES: list[dict[str, Any]] = [
    {"query": "when are the database backups?", "limit": 5},
    {"query": "deploy", "limit": 3},
    {"query": "what does my brother do for exercise", "limit": 10},
    {"query": "work meetings", "limit": 4, "filters": {"tags": ["work"]}},
    {"query": "passport trip", "limit": 2, "filters": {"types": ["event"]}},
    {"query": "recipes", "limit": 5, "filters": {"since": "2020-01-01", "until": "2030-01-01"}},
]

Ranked = list[tuple[str, int, float, Any]]
"""(id, rank, score, trace) per hit, in order."""


def ranked(hits: list[dict[str, Any]]) -> Ranked:
    return [(h["memory"]["id"], h["rank"], h["score"], h["trace"]) for h in hits]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """A store of the fixture memories (plus a dated one), written once through the library."""
    folder = tmp_path_factory.mktemp("parity")
    chosen = Settings(db=folder / "memory.db", cache_dir=None, embedder="fake")
    with (FIXTURES / "distractors.jsonl").open("rb") as lines:
        items, problems = read_memories_jsonl(lines)
    assert not problems
    with recalld.open(settings=chosen) as engine:
        engine.add_many(items)
        engine.add("Backups were moved to 03:00 UTC last week.", tags=["work"],
                   event_time=datetime.fromisoformat("2026-04-14T10:00"))  # fmt: skip
    return chosen


def library(settings: Settings, search: dict[str, Any]) -> Ranked:
    f = search.get("filters", {})
    times = {k: datetime.fromisoformat(f[k]) for k in ("since", "until") if k in f}
    with recalld.open(settings=settings) as engine:
        result = engine.search(search["query"], limit=search["limit"], explain=True,
                               as_of=datetime.fromisoformat(AS_OF), tags=f.get("tags", ()),
                               types=f.get("types", ()), **times)  # fmt: skip
    return ranked(to_json(result)["hits"])


def through_cli(settings: Settings, search: dict[str, Any], tmp_path: Path) -> Ranked:
    config = tmp_path / "empty.toml"
    config.write_text("", encoding="utf-8")
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECALLD_")}
    env["RECALLD_CONFIG"] = str(config)
    f = search.get("filters", {})
    argv = ["--db", str(settings.db), "--embedder", "fake", "search", search["query"],
            "--limit", str(search["limit"]), "--as-of", AS_OF, "--explain", "--json"]  # fmt: skip
    for tag in f.get("tags", ()):
        argv += ["--tag", tag]
    for kind in f.get("types", ()):
        argv += ["--type", kind]
    for name in ("since", "until"):
        if name in f:
            argv += [f"--{name}", f[name]]
    done = CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return ranked(json.loads(done.stdout)["hits"])


def through_mcp(settings: Settings, searches: list[dict[str, Any]]) -> list[Ranked]:
    pool = Engines(settings)
    server = build_server(lambda ctx: pool.get())

    async def run(client: Client) -> list[Ranked]:
        results = []
        for search in searches:
            found = await client.call_tool("memory_search",
                                           {**search, "explain": True, "as_of": AS_OF})  # fmt: skip
            results.append(ranked(ok(found)["hits"]))
        return results

    try:
        return session(server, run)
    finally:
        pool.close()


HttpSearch = Callable[[dict[str, Any]], Ranked]


@pytest.fixture(scope="module")
def through_http(settings: Settings) -> Iterator[HttpSearch]:
    """``POST /v1/search`` of the HTTP API, in process (no key exists: loopback serves)."""
    from starlette.testclient import TestClient

    from recalld.interfaces.http import create_app

    with TestClient(create_app(settings)) as client:

        def search(body: dict[str, Any]) -> Ranked:
            answer = client.post("/v1/search", json={**body, "explain": True, "as_of": AS_OF})
            assert answer.status_code == 200, answer.text
            return ranked(answer.json()["hits"])

        yield search


def test_library_cli_mcp_and_http_agree(
    settings: Settings, tmp_path: Path, through_http: HttpSearch
) -> None:
    expected = [library(settings, s) for s in SEARCHES]
    assert all(expected), "every search must find something, or the comparison is empty"
    assert any(len(r) > 1 for r in expected) and all(r[0][3]["channels"] for r in expected)
    assert [through_cli(settings, s, tmp_path) for s in SEARCHES] == expected
    assert through_mcp(settings, SEARCHES) == expected
    assert [through_http(s) for s in SEARCHES] == expected


BAD_SEARCHES: list[dict[str, Any]] = [
    {"query": "   "},
    {"query": "x", "limit": 0},
    {"query": "x", "limit": "many"},
    {"query": "x", "as_of": "soon"},
    {"query": "x", "filters": {"types": ["opinion"]}},
    {"query": "x", "filters": {"since": "last tuesday"}},
    {"query": "x", "filters": {"colour": "red"}},
]


def test_bad_input_gets_the_same_message_over_mcp_and_http(settings: Settings) -> None:
    from starlette.testclient import TestClient

    from recalld.interfaces.http import create_app

    with TestClient(create_app(settings)) as client:
        over_http = []
        for body in BAD_SEARCHES:
            answer = client.post("/v1/search", json=body)
            assert answer.status_code == 422, answer.text
            over_http.append(answer.json()["error"]["message"])
    pool = Engines(settings)

    async def run(client: Client) -> list[str]:
        results = [await client.call_tool("memory_search", body) for body in BAD_SEARCHES]
        assert all(r.is_error for r in results)
        return [text(r) for r in results]

    try:
        over_mcp = session(build_server(lambda ctx: pool.get()), run)
    finally:
        pool.close()
    assert over_mcp == over_http
    assert not any(m.startswith("Error executing tool") for m in over_mcp)
