"""``recalld serve`` (the HTTP API), ``recalld ui`` (the web inspector on a local store)
and ``recalld keys create|list|revoke`` (the API keys)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import urllib.request
import webbrowser
from contextlib import nullcontext
from pathlib import Path

import click

import recalld
from recalld.errors import install_hint
from recalld.interfaces.cli import Ctx, emit_json, errors, pass_ctx
from recalld.locations import is_dsn
from recalld.ports import free_port


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; without API keys only a loopback address is served.",
)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--access-log",
    is_flag=True,
    help="Write one line a request (client, method and path without its query "
    "string, status) to standard output.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Processes serving the one store [default: the machine's cores]; 1 serves from "
    "this process alone. Each loads its own copy of the model (about 0.4 GB with the "
    "packaged one; docs/http.md).",
)
@pass_ctx
def serve(obj: Ctx, host: str, port: int, access_log: bool, workers: int | None) -> None:
    """Serve the HTTP API (docs/http.md): the model loads once, searches answer warm.

    Requests need `Authorization: Bearer KEY` once any key exists (`recalld keys create`);
    each key reaches only its tenant's memories. OpenAPI at /openapi.json; the MCP tools
    (docs/mcp.md) at /mcp/, with the same keys.

    It also speeds up the shell: while a keyless server runs on a loopback address,
    `recalld search`, `search --context` and `add` with the same store, tenant and model
    send their request to it instead of loading the model (found through a small file in
    the user's runtime folder, readable by the user only and removed on exit, whose secret
    the server proves before the shell sends anything; nothing to configure).

    Without API keys the server answers every user of this machine (loopback keeps out
    other machines and web pages, not other accounts): on a shared machine, create a key.
    Connections are bounded: at most 4,096 at once, 5 s to send a request head.

    With several workers (the default on a machine of several cores) every process answers
    on the same address, and each sees the others' writes at once; the rate limit is
    counted in each worker apart (docs/http.md).
    """
    from recalld.interfaces.cli_mcp import has_mcp_sdk, mcp_tools
    from recalld.interfaces.http import serve as run
    from recalld.interfaces.workers import serve_workers

    workers = workers or default_workers()

    extensions = [mcp_tools().mcp_extension] if has_mcp_sdk() else []

    def say(line: str) -> None:
        click.echo(line, err=True)
        if " HTTP API on " not in line:
            return
        # the line that says where: the inspector and the MCP tools are there too
        where = line.split(" HTTP API on ")[1].split()[0]
        click.echo(
            f"inspector at {where}/ : a web page to search, browse and curate (docs/inspector.md)",
            err=True,
        )
        if not extensions:
            click.echo(f"MCP tools not served: {install_hint('mcp')}", err=True)
        else:
            click.echo(f"MCP tools at {where}/mcp/ (docs/mcp.md), with the same keys", err=True)

    from recalld.interfaces.cli_mcp import is_loopback
    from recalld.interfaces.discovery import advertise, new_secret
    from recalld.interfaces.local_server import search_settings

    with errors():
        settings = recalld.load_settings(obj.overrides, config_file=obj.config_file)
        shared = search_settings(obj.overrides, obj.config_file)
        if not is_dsn(settings.db):  # the shell finds the server by the store's full path
            settings = settings.model_copy(update={"db": Path(shared["db"])})
        secret = new_secret() if is_loopback(host) and port else None
        found = advertise(shared, host, port, secret) if secret else nullcontext(None)
        # uvicorn re-raises the SIGTERM it stopped on once it is done: exit through Python
        # then (a closed terminal's SIGHUP too), so the discovery file is removed on the way.
        for stop in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(stop, lambda number, frame: sys.exit(0))
        with found:
            if workers > 1:
                code = serve_workers(
                    settings,
                    host,
                    port,
                    workers,
                    say=say,
                    extensions=extensions,
                    access_log=access_log,
                    local_secret=secret,
                )
                if code:
                    sys.exit(code)
                return
            run(
                settings,
                host,
                port,
                say=say,
                extensions=extensions,
                access_log=access_log,
                local_secret=secret,
            )


def default_workers() -> int:
    """One worker a core (os.cpu_count(); 1 when it cannot tell)."""
    return os.cpu_count() or 1


@click.command()
@click.option(
    "--port",
    default=0,
    type=click.IntRange(0, 65535),
    help="Port on 127.0.0.1 (default: a free one).",
)
@click.option("--no-browser", is_flag=True, help="Print the address, open no browser.")
@pass_ctx
def ui(obj: Ctx, port: int, no_browser: bool) -> None:
    """Open the web inspector (docs/inspector.md) on this store: search with the ranking
    explained, browse and curate memories, the store at a glance.

    Serves the HTTP API on 127.0.0.1 only (as `recalld serve` does, same keys) and opens
    its page in the browser; Ctrl-C stops it.
    """
    from recalld.interfaces.http import serve as run

    port = port or free_port()
    url = f"http://127.0.0.1:{port}/"

    def say(line: str) -> None:
        click.echo(line, err=True)
        if " HTTP API on " in line:
            click.echo(f"inspector at {url} (Ctrl-C stops it)", err=True)

    with errors():
        settings = recalld.load_settings(obj.overrides, config_file=obj.config_file)
        if not no_browser:
            threading.Thread(target=open_when_up, args=(url,), daemon=True).start()
        run(settings, "127.0.0.1", port, say=say)


def open_when_up(url: str, timeout: float = 60.0) -> bool:
    """Open ``url`` in the browser once the server answers ``/healthz`` (False when it
    did not within ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "healthz", timeout=2):  # noqa: S310 - loopback
                webbrowser.open(url)
                return True
        except OSError:
            time.sleep(0.2)
    return False


@click.group()
def keys() -> None:
    """API keys of the HTTP server, kept hashed in the store (shown once when made)."""


@keys.command()
@click.option(
    "--tenant", "key_tenant", required=True, help="The tenant whose memories the key reaches."
)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="A shared namespace the key may read and write (repeatable).",
)
@click.option("--admin", is_flag=True, help="May also index folders on the server.")
@click.option("--label", help="A note to tell keys apart in `keys list`.")
@click.option(
    "--force", is_flag=True, help="Grant a --namespace that is another tenant's own (else refused)."
)
@pass_ctx
def create(
    obj: Ctx,
    key_tenant: str,
    namespaces: tuple[str, ...],
    admin: bool,
    label: str | None,
    force: bool,
) -> None:
    """Make a key; the key itself is printed as the last line, and only this once.

    A --namespace that is another tenant's own (``default``, or the tenant of an existing
    key) would give this key that tenant's private memories: it is refused unless --force.
    """
    with errors(), obj.engine(create=True) as engine:
        record, key = engine.keys.create(
            key_tenant, shared=namespaces, admin=admin, label=label, force=force
        )
    if obj.as_json:
        emit_json({"key": key, **_public(record)})
        return
    grants = ", ".join(record.shared) or "none"
    click.echo(
        f"key {record.id} for tenant {record.tenant!r} (shared namespaces: {grants}"
        f"{', admin' if record.admin else ''}); store it now, it is not shown again:",
        err=True,
    )
    click.echo(key)


@keys.command(name="list")
@pass_ctx
def list_(obj: Ctx) -> None:
    """Every key: id, tenant, namespaces, admin, created, revoked (never the secret)."""
    with errors(), obj.engine() as engine:
        records = engine.keys.list()
    if obj.as_json:
        emit_json([_public(r) for r in records])
        return
    for r in records:
        state = f"revoked {r.revoked_at:%Y-%m-%d %H:%M}" if r.revoked_at else "active"
        made = f"{r.created_at:%Y-%m-%d %H:%M}" if r.created_at else "?"
        click.echo(
            f"{r.id}  tenant={r.tenant}  shared={','.join(r.shared) or '-'}  "
            f"admin={'yes' if r.admin else 'no'}  created {made}  {state}"
            + (f"  ({r.label})" if r.label else "")
        )
    if not records:
        click.echo("no API keys: `recalld serve` answers without one, on loopback only")


@keys.command()
@click.argument("key_id")
@pass_ctx
def revoke(obj: Ctx, key_id: str) -> None:
    """Revoke a key (by its id, or the whole key); the server refuses it at once."""
    with errors(), obj.engine() as engine:
        record = engine.keys.revoke(key_id)
    if obj.as_json:
        emit_json(_public(record))
    else:
        click.echo(f"revoked key {record.id} of tenant {record.tenant!r}")


def _public(record: object) -> dict[str, object]:
    from recalld.serialize import to_json

    data: dict[str, object] = to_json(record)
    return data
