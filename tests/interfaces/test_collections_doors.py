"""Collections and their files through every door: the CLI (``index --name``, ``collection``,
``get``, ``search``), a real ``recalld serve`` on a loopback port (``/v1/files``,
``/v1/collections``, hits and the context block) with its MCP tools at ``/mcp/``, each key
confined to its tenant's files."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp_helpers import ok, refused, session, text, with_key
from serve_helpers import free_port, wait_until_serving
from tests.contract.folders import AUTH, docs_folder

import recalld
from recalld.interfaces.cli import cli
from recalld.keys import create_key

pytestmark = pytest.mark.integration


def run_cli(db: Path, *args: str, code: int = 0) -> Any:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECALLD_")}
    argv = ["--db", str(db), "--embedder", "fake", *args]
    done = CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)
    assert done.exit_code == code, done.output
    return done


def test_the_cli(tmp_path: Path) -> None:
    db, folder = tmp_path / "memory.db", docs_folder(tmp_path)
    run_cli(db, "index", str(folder), "--glob", "**/*.md", "--name", "docs", "--context",
            "Work documentation")  # fmt: skip
    run_cli(db, "collection", "context", "docs", "--path", "api", "API reference")
    assert "collections: docs" in run_cli(db, "status").stdout
    listed = json.loads(run_cli(db, "collection", "list", "--json").stdout)["collections"]
    assert listed[0]["contexts"] == {"": "Work documentation", "api": "API reference"}
    hits = json.loads(run_cli(db, "search", "when do tokens expire", "--json").stdout)["hits"]
    auth = next(h for h in hits if h["collection"]["path"] == "api/auth.md")
    assert auth["collection"]["context"] == ["Work documentation", "API reference"]
    shown = run_cli(db, "search", "when do tokens expire", "-n", "1").stdout
    assert "docs/api/auth.md" in shown and "API reference" in shown
    block = json.loads(run_cli(db, "search", "tokens", "--context", "300", "--json").stdout)
    assert "[Collections]\n- docs: Work documentation\n- docs/api: API reference" in block["text"]
    got = json.loads(run_cli(db, "get", "docs/api/auth.md", "--json").stdout)
    assert got["files"][0]["text"] == AUTH
    assert run_cli(db, "get", "docs/**/*.md").stdout.count("== docs/") == 3
    empty = run_cli(db, "get", "notes/*.md")
    assert "no indexed file matches" in empty.stderr
    missing = run_cli(db, "get", "docs/nope.md", code=3)
    assert "has no indexed file" in missing.stderr
    memory = json.loads(run_cli(db, "add", "a plain memory", "--json").stdout)
    assert json.loads(run_cli(db, "get", memory["id"], "--json").stdout)["content"] == (
        "a plain memory"
    )
    assert "no memory has id" in run_cli(db, "get", "no-such-id", code=3).stderr
    run_cli(db, "add", "an imported turn", "--id", "D1/3")
    assert json.loads(run_cli(db, "get", "D1/3", "--json").stdout)["content"] == "an imported turn"
    run_cli(db, "index", "--name", "docs")  # re-index by name
    removed = json.loads(run_cli(db, "collection", "remove", "docs", "--json").stdout)
    assert removed["chunks_deleted"] == 3
    assert "no collection yet" in run_cli(db, "collection", "list").stdout


@dataclass
class Served:
    base: str
    keys: dict[str, str]


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, recalld_command: list[str]
) -> Iterator[Served]:
    """``recalld serve`` on a store where alice indexed a collection; keys for alice, bob
    and an admin."""
    folder = tmp_path_factory.mktemp("served")
    settings = recalld.Settings(db=folder / "memory.db", cache_dir=None, embedder="fake")
    with recalld.open(settings=settings) as engine:
        keys = {name: create_key(engine.store, name)[1] for name in ("alice", "bob")}
        keys["admin"] = create_key(engine.store, "alice", admin=True)[1]
    alice = settings.model_copy(update={"tenant": "alice"})
    with recalld.open(settings=alice) as engine:
        engine.index([docs_folder(folder)], globs=["**/*.md"], name="docs",
                     context="Work documentation")  # fmt: skip
        engine.set_context("docs", "API reference", path="api")
    config = folder / "empty.toml"
    config.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    env.update(RECALLD_DB=str(settings.db), RECALLD_CONFIG=str(config), RECALLD_EMBEDDER="fake")
    port = free_port()
    command = [*recalld_command, "serve", "--port", str(port)]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until_serving(process, port)
        yield Served(f"http://127.0.0.1:{port}", keys)
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
        assert "Traceback" not in err, err


def call(served: Served, who: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {served.keys[who]}"}
    return httpx.request(method, served.base + path, headers=headers, timeout=30, **kwargs)


def test_http_files_collections_hits_and_context(served: Served) -> None:
    got = call(served, "alice", "POST", "/v1/files", json={"pattern": "docs/api/auth.md"})
    assert got.status_code == 200, got.text
    (one,) = got.json()["files"]
    assert one["text"] == AUTH
    assert one["collection"]["context"] == ["Work documentation", "API reference"]
    glob = call(served, "alice", "POST", "/v1/files", json={"pattern": "docs/**/*.md"}).json()
    assert [f["path"] for f in glob["files"]] == [
        "docs/api/auth.md",
        "docs/guide/install.md",
        "docs/guide/themes.md",
    ]
    empty = call(served, "alice", "POST", "/v1/files", json={"pattern": "x/*.md"}).json()
    assert empty["files"] == [] and empty["notes"]
    missing = call(served, "alice", "POST", "/v1/files", json={"pattern": "docs/nope.md"})
    assert missing.status_code == 404 and "has no indexed file" in missing.text
    bad = call(served, "alice", "POST", "/v1/files", json={"pattern": "a", "max_bytes": 0})
    assert bad.status_code == 422
    listed = call(served, "alice", "GET", "/v1/collections").json()["collections"]
    assert listed[0]["name"] == "docs" and listed[0]["path"] == "(shown to admin keys only)"
    admin = call(served, "admin", "GET", "/v1/collections").json()["collections"]
    assert admin[0]["path"].endswith("docs")
    hits = call(served, "alice", "POST", "/v1/search", json={"query": "tokens expire"}).json()
    assert {h["collection"]["name"] for h in hits["hits"]} == {"docs"}
    block = call(served, "alice", "POST", "/v1/context", json={"query": "tokens"}).json()
    assert block["text"].count("- docs: Work documentation") == 1
    spec = httpx.get(served.base + "/openapi.json", timeout=30).json()
    assert "GetFiles" in spec["components"]["schemas"]
    assert "/v1/files" in spec["paths"] and "/v1/collections" in spec["paths"]


def test_http_index_by_name_is_for_admin_keys(served: Served) -> None:
    again = call(served, "admin", "POST", "/v1/index", json={"name": "docs"})
    assert again.status_code == 200, again.text
    assert again.json()["files"] == 3
    assert call(served, "alice", "POST", "/v1/index", json={"name": "docs"}).status_code == 403
    unknown = call(served, "admin", "POST", "/v1/index", json={"name": "nope"})
    assert unknown.status_code == 404 and "no collection named 'nope'" in unknown.text


def test_http_keeps_each_tenant_to_its_files(served: Served) -> None:
    for pattern in ("docs/api/auth.md", "api/auth.md"):
        refused_ = call(served, "bob", "POST", "/v1/files", json={"pattern": pattern})
        assert refused_.status_code == 404, refused_.text
    assert call(served, "bob", "POST", "/v1/files", json={"pattern": "**"}).json()["files"] == []
    assert call(served, "bob", "GET", "/v1/collections").json() == {"collections": []}
    put = call(served, "bob", "PUT", "/v1/collections/docs/context", json={"text": "mine"})
    assert put.status_code == 404
    assert call(served, "bob", "DELETE", "/v1/collections/docs").status_code == 404
    hits = call(served, "bob", "POST", "/v1/search", json={"query": "tokens expire"}).json()
    assert hits["hits"] == []


def test_mcp_tools_read_files_and_label_hits(served: Served) -> None:
    async def run(client: Client) -> tuple[Any, ...]:
        got = await client.call_tool("memory_get_files", {"pattern": "docs/api/auth.md"})
        found = await client.call_tool("memory_search", {"query": "tokens expire"})
        none = await client.call_tool("memory_get_files", {"pattern": "docs/nope.md"})
        return got, found, none

    async def as_bob(client: Client) -> Any:
        return await client.call_tool("memory_get_files", {"pattern": "docs/api/auth.md"})

    url = served.base + "/mcp/"
    got, found, none = session(with_key(url, served.keys["alice"]), run)
    assert ok(got)["files"][0]["text"] == AUTH
    assert "== docs/api/auth.md" in text(got) and "context: API reference" in text(got)
    assert "from docs/api/auth.md: Work documentation; API reference" in text(found)
    assert "has no indexed file" in refused(none)
    assert "not an indexed file" in refused(session(with_key(url, served.keys["bob"]), as_bob))


def test_mcp_refuses_more_text_than_its_output_holds(served: Served) -> None:
    async def run(client: Client) -> Any:
        tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
        assert tools["memory_get_files"]["properties"]["max_bytes"]["maximum"] == 28_000
        return await client.call_tool(
            "memory_get_files", {"pattern": "docs/**/*.md", "max_bytes": 1_000_000}
        )

    said = refused(session(with_key(served.base + "/mcp/", served.keys["alice"]), run))
    assert "max_bytes" in said
