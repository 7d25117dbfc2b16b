"""``recalld mcp --http``: a real server on a loopback port, the SDK's streamable HTTP client."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_helpers import TOOLS, ok, refused, session

pytestmark = pytest.mark.integration

START_SECONDS = 60.0
"""How long the server may take to listen (a busy 2-core machine imports slowly)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_listening(port: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited: {process.communicate()[1]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listened on port {port} within {START_SECONDS} s")


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory, recalld_command: list[str]) -> Iterator[str]:
    """One server for the module, on a fresh store, with the fast fake embedder."""
    folder = tmp_path_factory.mktemp("mcp-http")
    config = folder / "empty.toml"
    config.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    env.update(RECALLD_DB=str(folder / "memory.db"), RECALLD_CONFIG=str(config),
               RECALLD_CACHE_DIR=str(folder / "cache"), RECALLD_EMBEDDER="fake")  # fmt: skip
    port = free_port()
    process = subprocess.Popen(
        [*recalld_command, "mcp", "--http", "--port", str(port)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_listening(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
        assert out == "", out
        assert "listening on loopback only" in err and "Traceback" not in err, err


def test_streamable_http_lists_and_calls_the_tools(url: str) -> None:
    async def run(client: Client) -> Any:
        names = {t.name for t in (await client.list_tools()).tools}
        added = await client.call_tool("memory_add", {"content": "the spare key is under the pot"})
        found = await client.call_tool("memory_search", {"query": "spare key", "explain": True})
        bad = await client.call_tool("memory_get", {"id": "nope"})
        return names, ok(added)["id"], found, bad

    names, memory_id, found, bad = session(url, run)
    assert names == TOOLS
    assert [h["memory"]["id"] for h in ok(found)["hits"]] == [memory_id]
    assert refused(bad) == "unknown id: no memory with id nope"


def test_the_memory_is_there_for_the_next_client(url: str) -> None:
    async def run(client: Client) -> Any:
        return await client.call_tool("memory_status", {})

    assert ok(session(url, run))["store"]["memories"] >= 1


def test_a_non_loopback_address_is_refused_without_keys(
    tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    done = subprocess.run(
        [*recalld_command, "--db", str(tmp_path / "m.db"), "mcp", "--http", "--host", "0.0.0.0"],
        env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "not a loopback address" in done.stderr
    assert not (tmp_path / "m.db").exists()
