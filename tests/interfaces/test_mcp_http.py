"""MCP over streamable HTTP: ``recalld mcp --http`` and ``recalld serve``'s ``/mcp/``, real
servers on loopback ports, the SDK's client, the HTTP API's keys and tenants."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp_helpers import TOOLS, ok, refused, session, text, with_key

import recalld
from recalld.keys import create_key, revoke_key

pytestmark = pytest.mark.integration

START_SECONDS = 60.0
"""How long a server may take to listen (a busy 2-core machine imports slowly)."""
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "probe", "version": "0"}}}  # fmt: skip
ACCEPT = {"Accept": "application/json, text/event-stream"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    url: str
    folder: Path
    keys: dict[str, str]


def start(folder: Path, command: list[str], args: list[str], keys: dict[str, str]) -> Any:
    """Run ``recalld ARGS --port P`` on a store in ``folder`` until the generator closes."""
    config = folder / "empty.toml"
    config.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    env.update(RECALLD_DB=str(folder / "memory.db"), RECALLD_CONFIG=str(config),
               RECALLD_CACHE_DIR=str(folder / "cache"), RECALLD_EMBEDDER="fake")  # fmt: skip
    port = free_port()
    process = subprocess.Popen(
        [*command, *args, "--port", str(port)], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert process.poll() is None, process.communicate()[1]
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, f"nothing listened on {port}"
            time.sleep(0.1)
        yield Server(f"http://127.0.0.1:{port}/mcp/", folder, keys)
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
        assert out == "" and "Traceback" not in err, (out, err)
        if args[0] == "serve":  # the startup lines say where the MCP tools are
            assert f"MCP tools at http://127.0.0.1:{port}/mcp/" in err, err


def store_with_keys(folder: Path) -> dict[str, str]:
    """Keys for alice and bob, and a revoked one, in the store the server will open."""
    settings = recalld.Settings(db=folder / "memory.db", cache_dir=None, embedder="fake")
    with recalld.open(settings=settings) as engine:
        keys = {name: create_key(engine.store, name)[1] for name in ("alice", "bob", "gone")}
        revoke_key(engine.store, keys["gone"])
    return keys


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory,
                recalld_command: list[str]) -> Iterator[Server]:  # fmt: skip
    """``recalld mcp --http`` on a new store without keys: loopback, the settings' tenant."""
    yield from start(tmp_path_factory.mktemp("open"), recalld_command,
                     ["mcp", "--http", "--create"], {})  # fmt: skip


@pytest.fixture(scope="module", params=[["mcp", "--http"], ["serve"]], ids=["mcp", "serve"])
def keyed_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 recalld_command: list[str]) -> Iterator[Server]:  # fmt: skip
    """A store with keys, served by ``recalld mcp --http`` and by ``recalld serve``."""
    folder = tmp_path_factory.mktemp("keyed")
    keys = store_with_keys(folder)
    yield from start(folder, recalld_command, request.param, keys)


def test_without_keys_the_tools_answer_on_loopback(open_server: Server) -> None:
    async def run(client: Client) -> Any:
        names = {t.name for t in (await client.list_tools()).tools}
        added = await client.call_tool("memory_add", {"content": "the spare key is under the pot"})
        found = await client.call_tool("memory_search", {"query": "spare key", "explain": True})
        bad = await client.call_tool("memory_get", {"id": "nope"})
        return names, ok(added)["id"], found, bad

    names, memory_id, found, bad = session(open_server.url, run)
    assert names == TOOLS
    assert [h["memory"]["id"] for h in ok(found)["hits"]] == [memory_id]
    assert refused(bad) == "unknown id: no memory with id nope"
    # The next client finds the memory: the server keeps one store open.
    again = session(open_server.url.rstrip("/"), lambda c: c.call_tool("memory_status", {}))
    assert ok(again)["store"]["memories"] == 1


@pytest.mark.parametrize(
    ("header", "reason"),
    [(None, "missing API key"), ("Bearer rk_0000_nope", "invalid API key"),
     ("Basic abc", "Bearer"), ("revoked", "revoked")],
)  # fmt: skip
def test_a_request_without_a_valid_key_is_refused(
    keyed_server: Server, header: str | None, reason: str
) -> None:
    if header == "revoked":
        header = f"Bearer {keyed_server.keys['gone']}"
    headers = {**ACCEPT, **({"Authorization": header} if header else {})}
    answer = httpx.post(keyed_server.url, json=INITIALIZE, headers=headers, timeout=30)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthorized"
    assert reason in answer.json()["error"]["message"]


def test_each_key_reaches_only_its_tenant(keyed_server: Server) -> None:
    url, keys = keyed_server.url, keyed_server.keys

    async def add(client: Client) -> str:
        added = await client.call_tool("memory_add", {"content": "alice's locker code is 4711"})
        return str(ok(added)["id"])

    async def peek(client: Client) -> list[Any]:
        return [
            await client.call_tool("memory_search", {"query": "locker code 4711"}),
            await client.call_tool("memory_get", {"id": secret}),
            await client.call_tool("memory_update", {"id": secret, "content": "bob was here"}),
            await client.call_tool("memory_forget", {"ids": [secret], "hard": True}),
            await client.call_tool("memory_status", {}),
        ]

    secret = session(with_key(url, keys["alice"]), add)
    search, get, update, forget, status = session(with_key(url, keys["bob"]), peek)
    assert ok(search)["hits"] == [] and secret not in text(search)
    unknown = f"unknown id: no memory with id {secret}"
    assert refused(get) == refused(update) == refused(forget) == unknown
    assert ok(status)["store"]["memories"] == 0
    mine = session(with_key(url, keys["alice"]),
                   lambda c: c.call_tool("memory_get", {"id": secret}))  # fmt: skip
    assert ok(mine)["content"] == "alice's locker code is 4711"


def test_a_non_loopback_address_is_refused_without_keys(
    tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    done = subprocess.run(
        [*recalld_command, "--db", str(tmp_path / "m.db"), "--embedder", "fake", "mcp",
         "--http", "--create", "--host", "0.0.0.0"], env=cli_env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "not a loopback address" in done.stderr
