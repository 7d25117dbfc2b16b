"""``recalld mcp``: the memory tools over the Model Context Protocol (stdio or streamable HTTP).

A thin adapter: each tool turns its typed arguments into one facade call, maps recalld's
errors to a tool error carrying the library's own message, and answers with compact text
the calling model reads (ids it can pass back included) plus the same JSON the CLI's
``--json`` prints as structured content.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

import recalld
from recalld.errors import InvalidInputError, RecalldError
from recalld.interfaces.describe import (
    describe_context,
    describe_memory,
    describe_search,
    memories,
)
from recalld.serialize import to_json

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from recalld.config import Settings
    from recalld.providers.embedders import Embedder

INSTRUCTIONS = (
    "recalld is this user's long-term memory. Call memory_search (or memory_context for a "
    "prompt-ready block) before answering anything that may depend on what was said or "
    "decided earlier; call memory_add to keep a durable fact, decision or preference. Ids in "
    "results can be passed to memory_get, memory_update and memory_forget."
)

EngineFor = Callable[[Context], recalld.MemoryEngine]
"""Which engine (tenant) a tool call reaches: from the settings over stdio, from the key
over HTTP."""


class Engines:
    """One engine per tenant, all sharing one embedder loaded once per process."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self._embedder = embedder
        self._engines: dict[tuple[str, tuple[str, ...]], recalld.MemoryEngine] = {}
        self._lock = threading.Lock()

    def embedder(self) -> Embedder:
        """The embedder, loaded on first use (a bad model path is then a tool error)."""
        with self._lock:
            if self._embedder is None:
                from recalld.providers.embedders import resolve_embedder

                self._embedder = resolve_embedder(self.settings.embedder, self.settings)
            return self._embedder

    def get(self, tenant: str | None = None, shared: tuple[str, ...] | None = None) -> (
            recalld.MemoryEngine):  # fmt: skip
        """The engine of ``tenant`` (default: the settings' tenant and shared namespaces)."""
        key = (tenant or self.settings.tenant,
               self.settings.shared if shared is None else tuple(shared))  # fmt: skip
        embedder = self.embedder()
        with self._lock:
            if key not in self._engines:
                settings = self.settings.model_copy(update={"tenant": key[0], "shared": key[1]})
                self._engines[key] = recalld.open(settings=settings, embedder=embedder)
            return self._engines[key]

    def close(self) -> None:
        with self._lock:
            for engine in self._engines.values():
                engine.close()
            self._engines.clear()


class Filters(BaseModel):
    """Restrictions applied before ranking; every field is optional."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(default=None, description="Only memories of this project.")
    scope: str | None = Field(default=None, description="Only memories of this scope, e.g. 'user'.")
    types: list[str] = Field(
        default_factory=list,
        description="Only memories of these types: insight, event, raw, turn, chunk.",
    )
    tags: list[str] = Field(default_factory=list, description="Only memories with all these tags.")
    session_id: str | None = Field(default=None, description="Only memories of this session.")
    since: str | None = Field(default=None, description="ISO date: only memories from then on.")
    until: str | None = Field(default=None, description="ISO date: only memories before then.")


def _time(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(
            f"{name} must be an ISO date or datetime such as 2024-03-14 or 2024-03-14T09:30"
        ) from None


def _search_args(filters: Filters | None, as_of: str | None) -> dict[str, Any]:
    f = filters or Filters()
    return dict(
        project=f.project, scope=f.scope, types=f.types, tags=f.tags, session_id=f.session_id,
        since=_time(f.since, "since"), until=_time(f.until, "until"), as_of=_time(as_of, "as_of"),
    )  # fmt: skip


def _result(text: str, data: Any) -> CallToolResult:
    structured = to_json(data)
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured if isinstance(structured, dict) else {"result": structured},
    )


def _call(run: Callable[[], CallToolResult]) -> CallToolResult:
    """Run one facade call; recalld's errors become a tool error with the library's own
    message (the facade validates before it writes, so nothing was changed)."""
    try:
        return run()
    except RecalldError as exc:
        return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)


Query = Annotated[str, Field(description="The question or keywords, in natural language.")]
Limit = Annotated[int, Field(description="How many memories to return (1-1000).")]
AsOf = Annotated[str | None, Field(
    description="Reference time for relative dates ('last week') and recency, ISO; "
    "default now.")]  # fmt: skip
Id = Annotated[str, Field(description="A memory id, as returned by the other tools.")]
MemoryType = Literal["insight", "event", "raw", "turn", "chunk"]

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                         open_world_hint=False)  # fmt: skip
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                          open_world_hint=False)  # fmt: skip


def build_server(engine_for: EngineFor) -> MCPServer:  # noqa: C901 - one short closure per tool
    """The MCP server with the seven memory tools, each reaching ``engine_for(ctx)``."""
    server: MCPServer = MCPServer(
        "recalld", instructions=INSTRUCTIONS, version=recalld.__version__, log_level="WARNING"
    )

    @server.tool(annotations=READ_ONLY)
    def memory_search(ctx: Context, query: Query, limit: Limit = 5,
                      filters: Filters | None = None, explain: bool = False,
                      as_of: AsOf = None) -> CallToolResult:  # fmt: skip
        """Search long-term memory: the memories that best answer `query`, best first.

        Returns one line per memory with its id, score, date, type and content (with
        `explain`, also why it ranked there: channels, fusion and adjustments). Use it before
        answering anything that may depend on earlier conversations, decisions or facts.
        """

        def run() -> CallToolResult:
            engine = engine_for(ctx)
            result = engine.search(query, limit=limit, explain=explain,
                                   **_search_args(filters, as_of))  # fmt: skip
            return _result(describe_search(result, explain), result)

        return _call(run)

    @server.tool(annotations=READ_ONLY)
    def memory_context(ctx: Context, query: Query, max_tokens: Annotated[int, Field(
            description="Token budget of the block (default 2000).")] = 2000,
            filters: Filters | None = None, as_of: AsOf = None) -> CallToolResult:  # fmt: skip
        """A prompt-ready block of the memories relevant to `query`, within `max_tokens`.

        Returns '[Memory Context]' followed by one dated line per memory, best first, cut to
        the token budget. Use it to ground a whole answer in what is remembered; use
        memory_search instead when you need ids or scores.
        """

        def run() -> CallToolResult:
            engine = engine_for(ctx)
            context = engine.context(query, max_tokens=max_tokens,
                                     **_search_args(filters, as_of))  # fmt: skip
            return _result(describe_context(context), context)

        return _call(run)

    @server.tool(annotations=WRITES)
    def memory_add(ctx: Context, content: Annotated[str, Field(
            description="The memory, one self-contained statement.")],
            type: Annotated[MemoryType, Field(
                description="insight (a durable fact or decision), event (something that "
                "happened), raw, turn or chunk.")] = "event",
            tags: list[str] | None = None, project: str | None = None,
            session_id: str | None = None, event_time: Annotated[str | None, Field(
                description="When it happened, ISO date or datetime.")] = None,
            pinned: bool = False) -> CallToolResult:  # fmt: skip
        """Store one memory for later recall; returns its id.

        Identical content already stored (same scope, project and session) is not stored
        again: the answer then names the existing id. Use it for facts, decisions and
        preferences worth remembering across sessions.
        """

        def run() -> CallToolResult:
            engine = engine_for(ctx)
            added = engine.add(content, type=type, tags=tuple(tags or ()), project=project,
                               session_id=session_id, pinned=pinned,
                               event_time=_time(event_time, "event_time"))  # fmt: skip
            same = f"not stored: identical to existing memory {added.duplicate_of}"
            return _result(f"stored {added.id}" if added.created else same, added)

        return _call(run)

    @server.tool(annotations=READ_ONLY)
    def memory_get(ctx: Context, id: Id) -> CallToolResult:
        """One memory by id: its full content, dates, type, tags, project and session."""
        return _call(lambda: _memory(engine_for(ctx).get(id)))

    @server.tool(annotations=CHANGES)
    def memory_update(ctx: Context, id: Id, content: str | None = None,
                      type: MemoryType | None = None, tags: list[str] | None = None,
                      project: str | None = None, event_time: str | None = None,
                      pinned: bool | None = None) -> CallToolResult:  # fmt: skip
        """Change fields of a memory (only those given); new content is re-embedded.

        Returns the updated memory. Use it to correct a memory rather than adding a second,
        contradicting one.
        """

        def run() -> CallToolResult:
            changes: dict[str, Any] = {k: v for k, v in dict(
                content=content, type=type, project=project, pinned=pinned,
                tags=None if tags is None else tuple(tags),
                event_time=_time(event_time, "event_time")).items() if v is not None}  # fmt: skip
            if not changes:
                raise InvalidInputError("nothing to update: give at least one field to change")
            return _memory(engine_for(ctx).update(id, **changes), "updated ")

        return _call(run)

    @server.tool(annotations=CHANGES)
    def memory_forget(ctx: Context, ids: Annotated[list[str], Field(
            description="The ids of the memories to forget.")],
            hard: Annotated[bool, Field(description="Delete for good instead of hiding "
                                        "from search.")] = False) -> CallToolResult:  # fmt: skip
        """Forget memories: hidden from search and context (or deleted with `hard`).

        If any id is unknown nothing is changed and the error names it. Use it when the user
        asks to forget something or a memory is wrong and should not be recalled.
        """

        def run() -> CallToolResult:
            changed = engine_for(ctx).forget(list(ids), hard=hard)
            verb = "deleted" if hard else "forgot"
            text = f"{verb} {memories(changed)}: {', '.join(ids)}"
            return _result(text, {"forgotten": changed, "hard": hard})

        return _call(run)

    @server.tool(annotations=READ_ONLY)
    def memory_status(ctx: Context) -> CallToolResult:
        """How many memories the store holds, by type, and which embedder made the vectors."""

        def run() -> CallToolResult:
            status = engine_for(ctx).status()
            s = status.store
            by_type = ", ".join(f"{k}: {v}" for k, v in s.by_type.items()) or "none"
            text = (f"{memories(s.memories)} ({by_type}), {s.forgotten} forgotten, "
                    f"{s.sessions} sessions; embedder {status.embedder}")  # fmt: skip
            return _result(text, status)

        return _call(run)

    return server


def _memory(memory: recalld.Memory, prefix: str = "") -> CallToolResult:
    return _result(prefix + describe_memory(memory), memory)


def log(message: str) -> None:
    """Say something to the person running the server: stderr, never the protocol's stdout."""
    print(f"recalld mcp: {message}", file=sys.stderr, flush=True)


def run_stdio(engines: Engines) -> None:
    """Serve the settings' tenant over stdio until the client closes the pipe."""
    server = build_server(lambda ctx: engines.get())
    log(f"serving store {engines.settings.db} (tenant {engines.settings.tenant}) over stdio")
    try:
        server.run("stdio")
    finally:
        engines.close()


def http_app(engines: Engines, host: str = "127.0.0.1") -> Starlette:
    """The streamable HTTP app (path ``/mcp``) serving the settings' tenant."""
    server = build_server(lambda ctx: engines.get())
    return server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host=host
    )


def run_http(engines: Engines, host: str, port: int) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until interrupted."""
    import uvicorn

    app = http_app(engines, host)
    log(f"serving store {engines.settings.db} (tenant {engines.settings.tenant}) at "
        f"http://{host}:{port}/mcp")  # fmt: skip
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        engines.close()
