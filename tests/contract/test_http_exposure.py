"""What a server's client learns about the server, on both backends: a store failure is one
plain sentence (the DSN, user, socket or file only in the server's log), and a tenant's
status names neither the store's location nor the server's indexed folders."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from recalld.config import Settings, is_dsn
from recalld.interfaces.exposure import HIDDEN, STORE_PROBLEM
from recalld.interfaces.http import create_app
from recalld.interfaces.mcp import mcp_extension
from recalld.keys import create_key
from recalld.providers.embedders import FakeEmbedder

from .conftest import Opener


def leaks(message: str, location: str) -> list[str]:
    """The parts of the store's location (file, folder, DSN user, database, socket) that a
    message shows."""
    if is_dsn(location):
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(location)
        parts = [str(info.get(k)) for k in ("user", "dbname", "host", "password") if info.get(k)]
    else:
        parts = [location, str(Path(location).parent)]
    return [p for p in parts + ["postgresql://", "sqlite"] if p and p in message]


def break_store(location: str) -> None:
    """Rename the memories table under a running server: its next read fails in the store."""
    rename = "ALTER TABLE memories RENAME TO memories_away"
    if is_dsn(location):
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(rename)
    else:
        with sqlite3.connect(location) as conn:
            conn.execute(rename)


@pytest.fixture
def served(open_as: Opener, store_location: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    root = open_as()
    keys = {"alice": create_key(root.store, "default")[1],  # the same tenant, not admin
            "admin": create_key(root.store, "default", admin=True)[1]}  # fmt: skip
    settings = Settings(db=store_location, cache_dir=None, embedder="fake")
    app = create_app(settings, embedder=FakeEmbedder(), extensions=[mcp_extension])
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client, {name: f"Bearer {key}" for name, key in keys.items()}


def mcp_call(client: TestClient, key: str, tool: str, arguments: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}  # fmt: skip
    answer = client.post("/mcp/", json=body, headers={
        "Authorization": key, "Accept": "application/json, text/event-stream"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def test_a_store_failure_names_no_location(
    served: tuple[TestClient, dict[str, str]], store_location: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    client, keys = served
    added = client.post("/v1/memories", json={"content": "before"},
                        headers={"Authorization": keys["alice"]})  # fmt: skip
    assert added.status_code == 201
    break_store(store_location)
    with caplog.at_level(logging.ERROR, logger="recalld.server"):
        answer = client.get("/v1/memories", headers={"Authorization": keys["alice"]})
        tool = mcp_call(client, keys["alice"], "memory_list", {})
    assert answer.status_code == 503
    assert answer.json()["error"] == {"code": "unavailable", "message": STORE_PROBLEM}
    assert tool["isError"] and tool["content"][0]["text"] == STORE_PROBLEM
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "memories" in logged, "the details belong in the server's log"
    assert leaks(answer.text, store_location) == []


@pytest.mark.parametrize("field", ["content", "id", "scope"])
def test_a_nul_character_names_no_location(
    served: tuple[TestClient, dict[str, str]], store_location: str, field: str
) -> None:
    client, keys = served
    body = {"content": "fine", field: "nul \x00 inside"}
    answer = client.post("/v1/memories", json=body, headers={"Authorization": keys["alice"]})
    assert answer.status_code in (201, 422, 503), answer.text
    assert leaks(answer.text, store_location) == []


def test_a_tenant_status_hides_where_the_store_lives(
    served: tuple[TestClient, dict[str, str]], store_location: str, open_as: Opener,
    tmp_path: Path,
) -> None:  # fmt: skip
    client, keys = served
    if not is_dsn(store_location):
        notes = tmp_path / "server-notes"
        notes.mkdir()
        (notes / "MEMORY.md").write_text("# Plan\n\nThe server's private plan.\n", "utf-8")
        open_as().index([str(notes)])
    mine = client.get("/v1/status", headers={"Authorization": keys["alice"]}).json()
    assert mine["store"]["path"] == HIDDEN and mine["sources"] is None
    assert leaks(str(mine), store_location) == []
    tool = mcp_call(client, keys["alice"], "memory_status", {})
    assert tool["structuredContent"]["store"]["path"] == HIDDEN
    assert leaks(str(tool), store_location) == []
    admin = client.get("/v1/status", headers={"Authorization": keys["admin"]}).json()
    assert admin["store"]["path"] != HIDDEN
    if not is_dsn(store_location):
        assert admin["sources"] is not None
