"""``recalld mcp``: serve the memory tools to an agent (stdio, or streamable HTTP)."""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import threading
from types import ModuleType

import click

import recalld
from recalld import heap
from recalld.errors import InvalidInputError, RecalldError, install_hint
from recalld.interfaces.cli import CONTEXT_SETTINGS, Ctx, errors, pass_ctx

DEFAULT_PORT = 8766
"""``recalld serve`` takes 8765; the standalone MCP server sits beside it."""


def has_mcp_sdk() -> bool:
    """Whether the MCP SDK (the ``mcp`` extra) is installed."""
    return importlib.util.find_spec("mcp") is not None


def mcp_tools() -> ModuleType:
    """The MCP adapter module, or a clear error when the ``mcp`` extra is not installed."""
    if not has_mcp_sdk():
        raise RecalldError(f"the MCP tools need the mcp extra: {install_hint('mcp')}")
    from recalld.interfaces import mcp as tools

    return tools


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--http",
    "http",
    is_flag=True,
    help="Serve streamable HTTP at http://HOST:PORT/mcp/ instead of stdio.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on with --http (without API keys, loopback only).",
)
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on with --http.",
)
@click.option(
    "--create",
    is_flag=True,
    help="Start with a new, empty store when none exists at --db (otherwise a "
    "missing store is refused: exit 4).",
)
@pass_ctx
def mcp(obj: Ctx, http: bool, host: str, port: int, create: bool) -> None:
    """Serve memory_search, memory_context, memory_add, memory_get, memory_update,
    memory_supersede, memory_forget, memory_list and memory_status to an agent over MCP.

    By default over stdio, as Claude Code, Cursor and Codex launch it (see docs/mcp.md);
    the store and tenant come from --db / --tenant or RECALLD_DB / RECALLD_TENANT (``~`` and
    $VARS are expanded), and the store must exist unless --create is given. Logs go
    to standard error, never to standard output. With --http, requests need
    `Authorization: Bearer KEY` once any key exists (`recalld keys create`), and each key
    reaches only its tenant; `recalld serve` also serves these tools at /mcp/.
    """
    from recalld.locations import missing_store, store_exists

    with errors():
        tools = mcp_tools()
        settings = recalld.load_settings(obj.overrides, config_file=obj.config_file)
        if not create and not store_exists(settings.db):
            raise missing_store(settings.db, "start with `recalld mcp --create` to make it")
        if http and not is_loopback(host) and _active_keys(obj) == 0:
            raise InvalidInputError(
                f"--host {host} is not a loopback address, and no API key exists: create one "
                "with `recalld keys create --tenant NAME`, or listen on 127.0.0.1"
            )
    if http:
        with errors():
            tools.run_http(settings, host, port)
        return
    engines = tools.Engines(settings)
    # Load the model while the client connects, so the first search is already warm.
    threading.Thread(target=_warm, args=(engines,), daemon=True).start()
    tools.run_stdio(engines)


def _active_keys(obj: Ctx) -> int:
    with obj.engine(create=True) as engine:
        return engine.keys.active()


def _warm(engines: object) -> None:
    from recalld.interfaces.engines import Engines

    assert isinstance(engines, Engines)
    # A failure here is the answer to the first tool call that needs the model.
    with contextlib.suppress(RecalldError):
        engines.embedder()
        heap.settle()  # the model is loaded: out of the collector's full passes
