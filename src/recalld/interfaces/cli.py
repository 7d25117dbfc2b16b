"""The ``recalld`` command line: parse, call one facade method, format, map errors.

Cheap to start: nothing heavy (pydantic, numpy, the model, the HTTP and MCP stacks) is
imported before a command needs it, and ``search``, ``search --context`` and ``add`` go to a
running local ``recalld serve`` of the same store when there is one
(:mod:`recalld.interfaces.local_server`).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

import recalld
from recalld.errors import RecalldError
from recalld.records import MEMORY_TYPES, TYPE_ALIASES
from recalld.retrieval.config import PRESETS

if TYPE_CHECKING:
    from recalld.interfaces.local_server import LocalServer

Answer = TypeVar("Answer")

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
EXIT_SKIPPED_LINES = 7
"""``recalld import`` stored what it could but skipped bad lines (each reported)."""


def emit_json(value: Any) -> None:
    """Print ``value`` in the JSON shape every interface shares (:mod:`recalld.serialize`)."""
    from recalld.serialize import to_json

    click.echo(json.dumps(to_json(value), ensure_ascii=False, indent=2))


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


class Ctx:
    """What the group resolves once and the commands share."""

    def __init__(
        self,
        db: str | None,
        embedder: str | None,
        config: str | None,
        as_json: bool,
        tenant: str | None = None,
        shared: str | None = None,
    ):
        self.overrides: dict[str, str | None] = {
            "db": db,
            "embedder": embedder,
            "tenant": tenant,
            "shared": shared,
        }
        self.config_file = Path(config) if config else None
        self.as_json = as_json

    @contextmanager
    def engine(self, *, create: bool = False) -> Iterator[recalld.MemoryEngine]:
        """The engine of the resolved settings. Only commands that write pass ``create``:
        the others refuse a store that does not exist (exit 4) instead of inventing one."""
        from recalld.locations import store_exists

        settings = recalld.load_settings(self.overrides, config_file=self.config_file)
        new = create and not store_exists(settings.db)
        with recalld.open(settings=settings, create=create) as engine:
            if new:
                click.echo(f"created a new store at {Path(settings.db).absolute()}", err=True)
            yield engine

    def server(self) -> LocalServer | None:
        """A running local ``recalld serve`` of this store, tenant and model, if one is up."""
        from recalld.interfaces import local_server

        with errors():
            return local_server.find(local_server.search_settings(self.overrides, self.config_file))

    def answer(
        self, path: str, args: dict[str, Any], kind: type[Answer], request: str, method: str
    ) -> Answer:
        """The answer to a read request: from a local server at ``path`` when one is up,
        else from ``MemoryEngine.<method>`` on ``recalld.requests.<request>`` in-process."""
        from recalld.serialize import from_json

        reply = self.remote(path, args)
        if reply is not None:
            return from_json(kind, reply)
        from recalld import requests

        with errors(), self.engine() as engine:
            result: Answer = getattr(engine, method)(
                requests.parse(getattr(requests, request), args)
            )
            return result

    def remote(self, path: str, body: dict[str, Any]) -> Any:
        """The local server's answer to ``body`` (JSON), or None to run in-process."""
        from recalld.interfaces.local_server import ServerGone
        from recalld.serialize import to_json

        server = self.server()
        if server is None:
            return None
        with errors():
            try:
                return server.call("POST", path, to_json(body))
            except ServerGone:
                return None


@contextmanager
def errors() -> Iterator[None]:
    """Map recalld's errors to a one-line message and its exit code."""
    try:
        yield
    except RecalldError as exc:
        fail(str(exc), exc.exit_code)


pass_ctx = click.make_pass_decorator(Ctx)

LAZY_COMMANDS = {
    "bench": "recalld.interfaces.cli_bench:bench",
    "collection": "recalld.interfaces.cli_files:collection",
    "get": "recalld.interfaces.cli_files:get",
    "import": "recalld.interfaces.cli_sources:import_",
    "index": "recalld.interfaces.cli_sources:index",
    "keys": "recalld.interfaces.cli_serve:keys",
    "mcp": "recalld.interfaces.cli_mcp:mcp",
    "migrate": "recalld.interfaces.cli_postgres:migrate",
    "postgres": "recalld.interfaces.cli_postgres:postgres",
    "serve": "recalld.interfaces.cli_serve:serve",
    "ui": "recalld.interfaces.cli_serve:ui",
    "watch": "recalld.interfaces.cli_sources:watch",
}
"""Commands defined in their own modules, imported only when invoked (keeps --help fast)."""


def _set_json(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    root = ctx.find_object(Ctx)
    if value and root is not None:
        root.as_json = True


def accept_json_after(command: click.Command) -> click.Command:
    """Let ``--json`` follow the subcommand too (``recalld search x --json``), as a new user
    types it; commands with a ``--json`` of their own (bench's report file) keep theirs."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_json_after(sub)
    if not any("--json" in getattr(p, "opts", ()) for p in command.params):
        command.params.append(
            click.Option(
                ["--json"],
                is_flag=True,
                expose_value=False,
                callback=_set_json,
                help="Machine-readable JSON output (same as recalld --json).",
            )
        )
    return command


class LazyGroup(click.Group):
    """A group whose heavier subcommands live in other modules, imported on first use.

    Every subcommand also takes ``--json`` after its name (see :func:`accept_json_after`).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self._available()])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._available():
            module_name, attribute = LAZY_COMMANDS[name].split(":")
            module = importlib.import_module(module_name)
            command = getattr(module, attribute)
            assert isinstance(command, click.Command)
            return accept_json_after(command)
        found = super().get_command(ctx, name)
        return None if found is None else accept_json_after(found)

    @staticmethod
    def _available() -> list[str]:
        return [
            name
            for name, target in LAZY_COMMANDS.items()
            if importlib.util.find_spec(target.split(":")[0]) is not None
        ]


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--db",
    envvar="RECALLD_DB",
    help="Store: an SQLite file or a postgresql:// DSN [env RECALLD_DB; default: user data dir].",
)
@click.option(
    "--embedder",
    envvar="RECALLD_EMBEDDER",
    help="local | multilingual | onnx:/model/folder | openai:MODEL [env RECALLD_EMBEDDER; "
    "default local].",
)
@click.option(
    "--tenant",
    envvar="RECALLD_TENANT",
    help="The tenant (user or organisation) whose memories to reach [env RECALLD_TENANT;"
    " default: default].",
)
@click.option(
    "--shared",
    envvar="RECALLD_SHARED",
    help="Shared namespaces the tenant is granted, comma-separated [env RECALLD_SHARED].",
)
@click.option("--config", "config", type=click.Path(dir_okay=False), help="A TOML config file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.option(
    "--llm",
    help="openai:MODEL switches on query expansion and auto routing "
    "[env RECALLD_LLM; default: none].",
)
@click.option("--llm-base-url", help="Any OpenAI-compatible endpoint [env RECALLD_LLM_BASE_URL].")
@click.option(
    "--reranker",
    help="onnx:/folder | llm | http:URL[#model] | maxsim [env RECALLD_RERANKER; default: none].",
)
@click.version_option(recalld.__version__, prog_name="recalld")
@click.pass_context
def cli(
    ctx: click.Context,
    db: str | None,
    embedder: str | None,
    tenant: str | None,
    shared: str | None,
    config: str | None,
    as_json: bool,
    llm: str | None,
    llm_base_url: str | None,
    reranker: str | None,
) -> None:
    """recalld: store what an agent learns; get back the few memories that answer a question."""
    ctx.obj = Ctx(db, embedder, config, as_json, tenant, shared)
    ctx.obj.overrides.update(llm=llm, llm_base_url=llm_base_url, reranker=reranker)


def _parse_time(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        fail(f"{name} must be an ISO date or datetime such as 2024-03-14 or 2024-03-14T09:30", 2)


TYPE_FILTER_HELP = "Only this type (repeatable); fact, preference ... find insight (see add)."


@cli.command()
@click.argument("content", required=False)
@click.option(
    "--type",
    "type_",
    default="event",
    show_default=True,
    type=click.Choice([*MEMORY_TYPES, *TYPE_ALIASES]),
    help="insight (a durable fact, decision or preference), event, raw, turn or "
    "chunk; fact, preference, decision and lesson are stored as insight, "
    "episode as event, message as turn, document as chunk, log as raw.",
)
@click.option("--tag", "tags", multiple=True, help="Repeatable.")
@click.option("--project")
@click.option("--scope", default="user", show_default=True)
@click.option("--session")
@click.option("--priority", type=float, default=1.0, show_default=True, help="1.0-2.0")
@click.option("--pinned", is_flag=True)
@click.option("--evergreen", is_flag=True, help="Never decays.")
@click.option("--event-time", help="When it happened (ISO).")
@click.option("--id", "memory_id", help="Explicit id (makes re-adding idempotent).")
@pass_ctx
def add(
    obj: Ctx,
    content: str | None,
    type_: str,
    tags: tuple[str, ...],
    project: str | None,
    scope: str,
    session: str | None,
    priority: float,
    pinned: bool,
    evergreen: bool,
    event_time: str | None,
    memory_id: str | None,
) -> None:
    """Store one memory (CONTENT, or standard input when CONTENT is '-' or absent)."""
    if content in (None, "-"):
        data = sys.stdin.buffer.read()
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            fail("standard input is not valid UTF-8", 2)
    memory = dict(
        content=content,
        type=type_,
        tags=tags,
        project=project,
        scope=scope,
        session_id=session,
        priority=priority,
        pinned=pinned,
        evergreen=evergreen,
        id=memory_id,
        event_time=_parse_time(event_time, "--event-time"),
    )
    from recalld.records import AddResult
    from recalld.serialize import from_json

    answer = obj.remote("/v1/memories", {k: v for k, v in memory.items() if v is not None})
    if answer is not None:
        result = from_json(AddResult, answer)
    else:
        from recalld.requests import AddMemories, parse

        with errors(), obj.engine(create=True) as engine:
            result = engine.run_add(parse(AddMemories, {"memories": [memory]}))[0]
    if obj.as_json:
        emit_json(result)
    elif result.created:
        click.echo(f"stored {result.id}")
    else:
        click.echo(f"not stored: identical to existing memory {result.duplicate_of}")


@cli.command()
@click.argument("query")
@click.option("-n", "--limit", default=5, show_default=True)
@click.option(
    "--mode", default="auto", show_default=True, type=click.Choice(["auto", "hybrid", "vector"])
)
@click.option("--preset", type=click.Choice(list(PRESETS)))
@click.option("--project")
@click.option("--scope")
@click.option("--type", "types", multiple=True, help=TYPE_FILTER_HELP)
@click.option("--tag", "tags", multiple=True)
@click.option("--session")
@click.option("--since", help="ISO date: only memories from then on.")
@click.option("--until", help="ISO date: only memories before then.")
@click.option("--as-of", help="Reference time for relative dates and decay (ISO).")
@click.option("--explain", is_flag=True, help="Show each hit's channels, fusion and adjustments.")
@click.option(
    "--near-misses",
    type=click.IntRange(0, 100),
    default=0,
    help="Also show this many of the next candidates and why each lost.",
)
@click.option(
    "--context",
    "max_tokens",
    type=int,
    default=None,
    help="Print a prompt-ready context block of at most this many tokens instead.",
)
@pass_ctx
def search(
    obj: Ctx,
    query: str,
    limit: int,
    mode: str,
    preset: str | None,
    project: str | None,
    scope: str | None,
    types: tuple[str, ...],
    tags: tuple[str, ...],
    session: str | None,
    since: str | None,
    until: str | None,
    as_of: str | None,
    explain: bool,
    near_misses: int,
    max_tokens: int | None,
) -> None:
    """Find the memories that answer QUERY."""
    filters = _filters(
        project=project,
        scope=scope,
        types=types,
        tags=tags,
        session_id=session,
        since=_parse_time(since, "--since"),
        until=_parse_time(until, "--until"),
    )
    args: dict[str, Any] = dict(
        query=query, mode=mode, preset=preset, filters=filters, as_of=_parse_time(as_of, "--as-of")
    )
    if max_tokens is not None:
        _context(obj, {**args, "max_tokens": max_tokens})
        return
    from recalld.records import SearchResult

    args.update(limit=limit, explain=explain, near_misses=near_misses)
    result = obj.answer("/v1/search", args, SearchResult, "SearchQuery", "run_search")
    if obj.as_json:
        emit_json(result)
        return
    from recalld.interfaces.render import print_search

    print_search(result, explain)


def _context(obj: Ctx, args: dict[str, Any]) -> None:
    """``search --context``: a prompt-ready block, from a local server or in-process."""
    from recalld.records import Context

    context = obj.answer("/v1/context", args, Context, "ContextQuery", "run_context")
    emit_json(context) if obj.as_json else click.echo(context.text or "(nothing found)")


@cli.command(name="list")
@click.option("-n", "--limit", default=20, show_default=True)
@click.option("--offset", default=0)
@click.option("--project")
@click.option("--scope")
@click.option("--type", "types", multiple=True, help=TYPE_FILTER_HELP)
@click.option("--tag", "tags", multiple=True)
@click.option("--session")
@click.option("--oldest-first", is_flag=True)
@click.option("--include-forgotten", is_flag=True)
@pass_ctx
def list_(
    obj: Ctx,
    limit: int,
    offset: int,
    project: str | None,
    scope: str | None,
    types: tuple[str, ...],
    tags: tuple[str, ...],
    session: str | None,
    oldest_first: bool,
    include_forgotten: bool,
) -> None:
    """List memories, newest first."""
    from recalld.requests import ListQuery, parse

    with errors(), obj.engine() as engine:
        memories = engine.run_list(
            parse(
                ListQuery,
                dict(
                    limit=limit,
                    offset=offset,
                    newest_first=not oldest_first,
                    include_forgotten=include_forgotten,
                    filters=_filters(
                        project=project, scope=scope, types=types, tags=tags, session_id=session
                    ),
                ),
            )
        )
    if obj.as_json:
        emit_json(memories)
        return
    from recalld.interfaces.render import print_memories

    print_memories(memories)


@cli.command()
@click.argument("memory_ids", nargs=-1, required=True)
@click.option("--hard", is_flag=True, help="Delete for good instead of hiding.")
@pass_ctx
def forget(obj: Ctx, memory_ids: tuple[str, ...], hard: bool) -> None:
    """Forget memories (hidden from search; --hard deletes them)."""
    from recalld.requests import ForgetMemories, parse

    with errors(), obj.engine() as engine:
        changed = engine.run_forget(parse(ForgetMemories, {"ids": memory_ids, "hard": hard}))
    if obj.as_json:
        emit_json({"forgotten": changed, "hard": hard})
    else:
        click.echo(
            f"{'deleted' if hard else 'forgot'} {changed} memor{'y' if changed == 1 else 'ies'}"
        )


@cli.command()
@click.argument("memory_id")
@click.option("--by", "by", help="The id of the memory that replaces it.")
@click.option("--until", "until", help="Valid until this time (ISO); superseded after it.")
@click.option("--clear", is_flag=True, help="Make the memory current again.")
@pass_ctx
def supersede(obj: Ctx, memory_id: str, by: str | None, until: str | None, clear: bool) -> None:
    """Mark a memory as no longer current (it then ranks below current memories)."""
    when = _parse_time(until, "--until")
    with errors(), obj.engine() as engine:
        memory = engine.supersede(memory_id, by=by, until=when, clear=clear)
    if obj.as_json:
        emit_json(memory)
    elif clear:
        click.echo(f"{memory.id} is current again")
    else:
        parts = [f"by {memory.superseded_by}"] if memory.superseded_by else []
        if memory.valid_until is not None:
            parts.append(f"after {memory.valid_until.isoformat()}")
        click.echo(f"{memory.id} superseded {' and '.join(parts)}")


def _filters(**given: Any) -> dict[str, Any]:
    """The filter options given on the command line, as request ``filters``."""
    return {k: v for k, v in given.items() if v not in (None, ())}


@cli.command()
@pass_ctx
def status(obj: Ctx) -> None:
    """Show the store: counts, size, embedder fingerprint."""
    with errors(), obj.engine() as engine:
        report = engine.status()
    if obj.as_json:
        emit_json(report)
        return
    from recalld.interfaces.render import print_status

    print_status(report)


@cli.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_ctx
def reindex(obj: Ctx, yes: bool) -> None:
    """Re-embed every memory with the configured embedder (e.g. after changing models)."""
    from recalld.interfaces.progress import progress_bar

    with errors(), obj.engine() as engine:
        stats = engine.status().store
        total = stats.memories + stats.forgotten
        if not yes and sys.stdin.isatty():
            click.confirm(
                f"re-embed {total} memories with '{engine.settings.embedder}'?", abort=True
            )
        with progress_bar("re-embedding", total, obj.as_json) as bar:
            count = engine.reindex(progress=bar)
    emit_json({"reindexed": count}) if obj.as_json else click.echo(f"re-embedded {count} memories")


def main() -> None:
    """Entry point of the ``recalld`` script."""
    cli(prog_name="recalld")
