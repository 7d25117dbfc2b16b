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
LOCAL = "http://127.0.0.1"
"""The test client's address: a server without keys answers only a loopback Host."""
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

    with TestClient(create_app(settings), base_url=LOCAL) as client:

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
    {"query": "x", "colour": "red"},
    {"query": 42},
    {"query": "x" * 100_000},
]


def test_bad_input_gets_the_same_message_over_mcp_and_http(settings: Settings) -> None:
    from starlette.testclient import TestClient

    from recalld.interfaces.http import create_app

    with TestClient(create_app(settings), base_url=LOCAL) as client:
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


# -- supersede and list: the same change and the same listing through every door -------------

OLD, NEW = "ana-arrives-12", "ana-arrives-14"
MARKS: list[dict[str, Any]] = [
    {"by": NEW},
    {"until": "2026-05-01T00:00:00+00:00"},
    {"clear": True},
    {"by": OLD},  # itself: refused
    {},  # nothing said: refused
    {"clear": True, "by": NEW},  # contradictory: refused
    {"by": "no-such-memory"},  # unknown: refused
]
LISTINGS: list[dict[str, Any]] = [
    {"limit": 3},
    {"limit": 2, "offset": 1, "newest_first": False},
    {"limit": 10, "filters": {"tags": ["work"]}},
    {"limit": 2, "offset": 1, "filters": {"types": ["event"], "tags": ["work"]}},
]

Outcome = tuple[str | None, str | None] | str
"""(superseded_by, valid_until) of the memory after a mark, or the refusal's message."""


def fresh_store(folder: Path) -> Settings:
    """Two memories about one fact, the newer replacing the older."""
    folder.mkdir()
    chosen = Settings(db=folder / "memory.db", cache_dir=None, embedder="fake")
    with recalld.open(settings=chosen) as engine:
        engine.add("Ana arrives on 12 April.", id=OLD)
        engine.add("Ana's flight moved: she now arrives on 14 April.", id=NEW)
    return chosen


def outcome(memory: dict[str, Any]) -> Outcome:
    return (memory["superseded_by"], memory["valid_until"])


def marks_by_library(settings: Settings) -> list[Outcome]:
    found: list[Outcome] = []
    with recalld.open(settings=settings) as engine:
        for mark in MARKS:
            until = datetime.fromisoformat(mark["until"]) if "until" in mark else None
            try:
                memory = engine.supersede(OLD, by=mark.get("by"), until=until,
                                          clear=mark.get("clear", False))  # fmt: skip
            except recalld.RecalldError as exc:
                found.append(str(exc))
            else:
                found.append(outcome(to_json(memory)))
    return found


def cli_env(tmp_path: Path) -> dict[str, str | None]:
    config = tmp_path / "empty.toml"
    config.write_text("", encoding="utf-8")
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECALLD_")}
    env["RECALLD_CONFIG"] = str(config)
    return env


def marks_by_cli(settings: Settings, tmp_path: Path) -> list[Outcome]:
    found: list[Outcome] = []
    for mark in MARKS:
        argv = ["--db", str(settings.db), "--embedder", "fake", "supersede", OLD, "--json"]
        argv += [f"--{k}" if v is True else f"--{k}={v}" for k, v in mark.items()]
        done = CliRunner().invoke(cli, argv, env=cli_env(tmp_path), catch_exceptions=False)
        if done.exit_code == 0:
            found.append(outcome(json.loads(done.stdout)))
        else:
            found.append(done.stderr.strip().removeprefix("error: "))
    return found


def marks_by_http(settings: Settings) -> list[Outcome]:
    from starlette.testclient import TestClient

    from recalld.interfaces.http import create_app

    found: list[Outcome] = []
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        for mark in MARKS:
            answer = client.post(f"/v1/memories/{OLD}/supersede", json=mark)
            if answer.status_code == 200:
                found.append(outcome(answer.json()))
            else:
                assert answer.status_code in (404, 409, 422), answer.text
                found.append(answer.json()["error"]["message"])
    return found


def marks_by_mcp(settings: Settings) -> list[Outcome]:
    pool = Engines(settings)

    async def run(client: Client) -> list[Outcome]:
        found: list[Outcome] = []
        for mark in MARKS:
            result = await client.call_tool("memory_supersede", {"id": OLD, **mark})
            found.append(text(result) if result.is_error else outcome(ok(result)))
        return found

    try:
        return session(build_server(lambda ctx: pool.get()), run)
    finally:
        pool.close()


def test_supersede_does_the_same_through_every_door(tmp_path: Path) -> None:
    expected = marks_by_library(fresh_store(tmp_path / "library"))
    assert expected[:3] == [(NEW, None), (NEW, "2026-05-01T00:00:00+00:00"), (None, None)]
    assert all(isinstance(e, str) for e in expected[3:]), expected
    assert marks_by_cli(fresh_store(tmp_path / "cli"), tmp_path) == expected
    assert marks_by_http(fresh_store(tmp_path / "http")) == expected
    assert marks_by_mcp(fresh_store(tmp_path / "mcp")) == expected


def list_by_library(settings: Settings, listing: dict[str, Any]) -> list[str]:
    f = listing.get("filters", {})
    with recalld.open(settings=settings) as engine:
        found = engine.list(limit=listing["limit"], offset=listing.get("offset", 0),
                            newest_first=listing.get("newest_first", True),
                            project=f.get("project"), tags=f.get("tags", ()),
                            types=f.get("types", ()))  # fmt: skip
    return [m.id for m in found]


def list_by_cli(settings: Settings, listing: dict[str, Any], tmp_path: Path) -> list[str]:
    f = listing.get("filters", {})
    argv = ["--db", str(settings.db), "--embedder", "fake", "list", "--json", "--limit",
            str(listing["limit"]), "--offset", str(listing.get("offset", 0))]  # fmt: skip
    argv += ["--oldest-first"] if listing.get("newest_first") is False else []
    argv += [a for tag in f.get("tags", ()) for a in ("--tag", tag)]
    argv += [a for kind in f.get("types", ()) for a in ("--type", kind)]
    argv += ["--project", f["project"]] if "project" in f else []
    done = CliRunner().invoke(cli, argv, env=cli_env(tmp_path), catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return [m["id"] for m in json.loads(done.stdout)]


def list_by_http(settings: Settings, listing: dict[str, Any]) -> list[str]:
    from starlette.testclient import TestClient

    from recalld.interfaces.http import create_app

    f = listing.get("filters", {})
    params: dict[str, Any] = {k: v for k, v in listing.items() if k != "filters"}
    params.update(tag=f.get("tags", []), type=f.get("types", []))
    if "project" in f:
        params["project"] = f["project"]
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        answer = client.get("/v1/memories", params=params)
    assert answer.status_code == 200, answer.text
    return [m["id"] for m in answer.json()["memories"]]


def list_by_mcp(settings: Settings, listings: list[dict[str, Any]]) -> list[list[str]]:
    pool = Engines(settings)

    async def run(client: Client) -> list[list[str]]:
        found = [ok(await client.call_tool("memory_list", listing)) for listing in listings]
        return [[m["id"] for m in page["memories"]] for page in found]

    try:
        return session(build_server(lambda ctx: pool.get()), run)
    finally:
        pool.close()


def test_list_gives_the_same_page_through_every_door(settings: Settings, tmp_path: Path) -> None:
    expected = [list_by_library(settings, listing) for listing in LISTINGS]
    assert all(expected) and len(set(map(tuple, expected))) == len(expected), expected
    assert [list_by_cli(settings, listing, tmp_path) for listing in LISTINGS] == expected
    assert [list_by_http(settings, listing) for listing in LISTINGS] == expected
    assert list_by_mcp(settings, LISTINGS) == expected
