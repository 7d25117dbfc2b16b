"""``recalld mcp`` launched as Claude Code, Cursor and Codex launch it, from docs/mcp.md.

The SDK's own stdio client starts the installed entry point with the command, arguments and
environment the docs give, and lists and calls every tool (the real packaged model: one
session for the documented configuration).
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_helpers import TOOLS, ok, refused, session, text

import recalld

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"

pytestmark = pytest.mark.integration


def documented_configs() -> dict[str, dict[str, Any]]:
    """The stdio configurations docs/mcp.md shows for each client, as the client reads them."""
    page = DOCS.read_text(encoding="utf-8")
    found: dict[str, dict[str, Any]] = {}
    for heading, lang, body in re.findall(r"### (\w[\w ]*)\n(?:.*?\n)*?```(json|toml)\n(.*?)```",
                                          page, flags=re.S):  # fmt: skip
        if '"command"' in body or "command =" in body:
            config = json.loads(body)["mcpServers"] if lang == "json" else (
                tomllib.loads(body)["mcp_servers"])  # fmt: skip
            found[heading.strip()] = config["recalld"]
    return found


def test_the_docs_give_one_stdio_configuration_for_each_client() -> None:
    configs = documented_configs()
    assert set(configs) == {"Claude Code", "Cursor", "Codex"}
    first = configs["Claude Code"]
    assert all(c == first for c in configs.values()), configs
    assert first["command"] == "recalld" and first["args"] == ["mcp"]
    assert set(first["env"]) == {"RECALLD_DB"}
    page = DOCS.read_text(encoding="utf-8")
    assert "claude mcp add recalld --env RECALLD_DB=" in page and "-- recalld mcp" in page


def launch(recalld_command: list[str], cli_env: dict[str, str], db: Path,
           **env: str) -> StdioServerParameters:  # fmt: skip
    """The documented configuration, run with this checkout's entry point on a temporary
    store (made first, as the user's first `recalld add` makes theirs: `recalld mcp` refuses
    a missing one); the user's config file and embedding cache are kept out of the test."""
    recalld.open(settings=recalld.Settings(db=db, cache_dir=None)).close()
    documented = documented_configs()["Claude Code"]
    assert documented["command"] == Path(recalld_command[0]).name
    isolation = {k: cli_env[k] for k in ("RECALLD_CONFIG", "RECALLD_CACHE_DIR")}
    return StdioServerParameters(
        command=recalld_command[0], args=documented["args"],
        env={**documented["env"], "RECALLD_DB": str(db), **isolation, **env},
    )  # fmt: skip


async def every_tool(client: Client) -> dict[str, Any]:
    names = {t.name for t in (await client.list_tools()).tools}
    add = [await client.call_tool("memory_add", {"content": c}) for c in (
        "Pinning psycopg to 3.2 fixed the broken billing deploy on Friday.",
        "My sister Ana arrives from Porto on the 14th.",
        "The office plants need water every Tuesday.",
    )]  # fmt: skip
    ids = [ok(r)["id"] for r in add]
    out: dict[str, Any] = {"names": names, "ids": ids}
    out["search"] = await client.call_tool(
        "memory_search", {"query": "how did we repair the payments release that failed?",
                          "limit": 2, "explain": True})  # fmt: skip
    out["context"] = await client.call_tool(
        "memory_context", {"query": "when is my sister coming?"}
    )
    out["get"] = await client.call_tool("memory_get", {"id": ids[2]})
    out["update"] = await client.call_tool(
        "memory_update", {"id": ids[2], "content": "The office plants need water on Fridays."}
    )
    out["forget"] = await client.call_tool("memory_forget", {"ids": [ids[1]]})
    out["status"] = await client.call_tool("memory_status", {})
    out["bad"] = await client.call_tool("memory_search", {"query": "x", "limit": 0})
    return out


def test_documented_stdio_config_lists_and_calls_every_tool(
    tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    params = launch(recalld_command, cli_env, tmp_path / "memory.db")
    errlog = tmp_path / "stderr.txt"
    with errlog.open("w", encoding="utf-8") as sink:
        # mode="legacy": the initialize handshake these clients perform today.
        out = session(stdio_client(params, errlog=sink), every_tool, mode="legacy",
                      read_timeout_seconds=60)  # fmt: skip
    assert out["names"] == TOOLS
    hits = ok(out["search"])["hits"]
    assert hits[0]["memory"]["id"] == out["ids"][0], text(out["search"])
    assert "why: channels" in text(out["search"]) and hits[0]["trace"]["channels"]
    assert "Ana arrives from Porto" in text(out["context"]).splitlines()[1]
    assert ok(out["get"])["content"] == "The office plants need water every Tuesday."
    assert ok(out["update"])["content"] == "The office plants need water on Fridays."
    assert ok(out["forget"]) == {"forgotten": 1, "hard": False}
    assert ok(out["status"])["store"]["memories"] == 2
    assert refused(out["bad"]) == "limit must be between 1 and 1000"
    log = errlog.read_text(encoding="utf-8")
    assert "recalld mcp: serving store" in log and "Traceback" not in log


def test_stdio_tenants_from_the_environment_are_kept_apart(
    tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    db = tmp_path / "shared.db"

    async def add(client: Client) -> str:
        return str(
            ok(await client.call_tool("memory_add", {"content": "alice's pin is 4711"}))["id"]
        )

    async def peek(client: Client) -> list[Any]:
        return [await client.call_tool("memory_search", {"query": "pin 4711"}),
                await client.call_tool("memory_get", {"id": secret}),
                await client.call_tool("memory_forget", {"ids": [secret]})]  # fmt: skip

    fake = {"RECALLD_EMBEDDER": "fake"}
    secret = session(launch(recalld_command, cli_env, db, RECALLD_TENANT="alice", **fake), add)
    search, get, forget = session(
        launch(recalld_command, cli_env, db, RECALLD_TENANT="bob", **fake), peek
    )
    assert ok(search)["hits"] == []
    assert refused(get) == refused(forget) == f"unknown id: no memory with id {secret}"
    (mine,) = session(launch(recalld_command, cli_env, db, RECALLD_TENANT="alice", **fake),
                      lambda c: _all(c.call_tool("memory_get", {"id": secret})))  # fmt: skip
    assert ok(mine)["forgotten_at"] is None


async def _all(*calls: Any) -> list[Any]:
    return [await c for c in calls]


def test_standard_output_carries_nothing_but_the_protocol(
    tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    """A client that closes the pipe at once: the server leaves quietly, stdout untouched."""
    env = {**cli_env, "RECALLD_DB": str(tmp_path / "m.db"), "RECALLD_EMBEDDER": "fake"}
    done = subprocess.run([*recalld_command, "mcp", "--create"], input="", env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr.startswith("recalld mcp: serving store")


def test_a_model_that_cannot_load_is_a_tool_error_not_a_crash(
    tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    broken = {"RECALLD_EMBEDDER": f"onnx:{tmp_path / 'no-model'}"}

    async def calls(client: Client) -> list[Any]:
        return [await client.call_tool("memory_search", {"query": "anything"}),
                await client.call_tool("memory_status", {})]  # fmt: skip

    search, status = session(launch(recalld_command, cli_env, tmp_path / "m.db", **broken), calls)
    assert "model file not found" in refused(search)
    assert "model file not found" in refused(status)
