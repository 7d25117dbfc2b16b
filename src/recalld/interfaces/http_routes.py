"""The HTTP API's routes, by resource: the server (``/healthz``, ``/v1/status``), memories
(``/v1/memories``), retrieval (``/v1/search``, ``/v1/context``) and bulk work
(``/v1/import``, ``/v1/index``); :mod:`.http_files` adds collections and files.

Each route authenticates its caller, turns its body into one of :mod:`recalld.requests`'
objects with :func:`recalld.requests.parse` (bodies are read by hand, so that a wrong one is
refused with the library's own message), runs it with the caller's engine in a worker
thread, and answers with :mod:`recalld.serialize`'s JSON."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool

import recalld
from recalld.engine import Status
from recalld.errors import InvalidInputError
from recalld.interfaces.auth import Caller
from recalld.interfaces.exposure import public_status, too_large_answer
from recalld.interfaces.http_errors import ApiError
from recalld.interfaces.http_files import install_file_routes
from recalld.interfaces.http_openapi import (
    AddResults,
    ForgetResult,
    Health,
    IndexBody,
    MemoryList,
    body,
    responses,
)
from recalld.interfaces.server_state import ServerState
from recalld.records import AddResult, Context, Memory, SearchResult
from recalld.requests import (
    NOTHING_TO_CHANGE,
    AddMemories,
    ContextQuery,
    ForgetMemories,
    ImportRequest,
    ListQuery,
    MemoryIn,
    MemoryPatch,
    SearchQuery,
    SupersedeMark,
    SupersedeMemory,
    UpdateMemory,
    describe_errors,
    parse,
)
from recalld.serialize import to_json
from recalld.sources.importer import ImportReport
from recalld.sources.indexer import IndexReport

MAX_PAGE = 1000
"""The most memories ``GET /v1/memories`` returns a page."""


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "the request body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON") from None


async def _object(request: Request, what: str) -> dict[str, Any]:
    """The request's body, which must be a JSON object (``what`` it holds, for the error)."""
    data = await _json_body(request)
    if not isinstance(data, dict):
        raise ApiError(422, f"the body must be a JSON object ({what})")
    return data


SEARCH_THREAD_PREFIX = "recalld-search"
"""The names of the threads searches run on (``recalld-search_0`` ...)."""


class Doors:
    """What every route needs of the server: its caller, and worker threads to run on."""

    def __init__(self, state: ServerState, answer_cap: Callable[[], int]) -> None:
        self.state = state
        self.answer_cap = answer_cap
        turns = state.settings.http_search_concurrency or 2 * (os.cpu_count() or 1)
        self._searching = asyncio.Semaphore(turns)
        # One thread a turn, kept: each keeps its store connection (SQLite's page cache and
        # prepared statements) warm from one search to the next. On the general pool a
        # search took whichever of a dozen threads was idle, and idle ones end after 10 s.
        self._turns = turns
        self._search_threads = self._threads()

    def close(self) -> None:
        """End the search threads once the searches on them are done (the app's shutdown,
        before its engines close). A later search starts new ones."""
        threads, self._search_threads = self._search_threads, self._threads()
        threads.shutdown(wait=True)

    def _threads(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(self._turns, thread_name_prefix=SEARCH_THREAD_PREFIX)

    def answer(self, value: Any, status: int = 200) -> Any:
        """``value`` as a JSON answer, or 422 when it is larger than the answers' cap."""
        response = JSONResponse(to_json(value), status_code=status)
        cap = self.answer_cap()
        if len(response.body) > cap:
            raise ApiError(422, too_large_answer(len(response.body), cap))
        return response

    async def caller(self, request: Request) -> Caller:
        return await self.state.caller(request.scope)

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        return await run_in_threadpool(function, *args)

    async def search_turn(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function`` on one of the search threads once one of the search turns is free.
        The turn is held until the function returns, even when the request is cancelled
        first (a client gone): a turn is a thread busy."""
        await self._searching.acquire()
        try:
            context = contextvars.copy_context()  # as run_in_threadpool: the request's context
            running = asyncio.get_running_loop().run_in_executor(
                self._search_threads, context.run, function, *args
            )
        except BaseException:
            self._searching.release()
            raise
        running.add_done_callback(self._turn_done)
        return await asyncio.shield(running)

    def _turn_done(self, running: asyncio.Future[Any]) -> None:
        self._searching.release()
        if not running.cancelled():
            running.exception()  # seen here too: its request may have been cancelled


def install_routes(app: FastAPI, state: ServerState, answer_cap: Callable[[], int]) -> Doors:
    """Every route of the API on ``app``, answering at most ``answer_cap()`` bytes; the
    routes' :class:`Doors`, for the app to close at its shutdown."""
    doors = Doors(state, answer_cap)
    _server_routes(app, doors)
    _memory_routes(app, doors)
    _memory_changes(app, doors)
    _retrieval_routes(app, doors)
    _bulk_routes(app, doors)
    install_file_routes(app, doors, _object)
    return doors


def _server_routes(app: FastAPI, doors: Doors) -> None:
    @app.get(
        "/healthz",
        tags=["server"],
        summary="Liveness (no key needed)",
        responses=responses(200, "The server is up.", Health),
        openapi_extra={"security": []},
    )
    async def healthz() -> Any:
        return doors.answer(Health("ok", recalld.__version__))

    @app.get(
        "/v1/status",
        tags=["server"],
        summary="The tenant's store: counts, embedder (the store's location and indexed "
        "folders for admin keys only)",
        responses=responses(200, "Counts and facts.", Status),
    )
    async def status(request: Request) -> Any:
        who = await doors.caller(request)
        found = await doors.run(who.engine.status)
        return doors.answer(found if who.admin else public_status(found))


ADD_EXAMPLES = [
    {"content": "My sister Ana arrives on 14 March.", "tags": ["family"]},
    {
        "memories": [
            {"content": "I moved to Berlin in March 2024."},
            {"content": "Prefers tea over coffee.", "type": "insight"},
        ]
    },
]


def _memory_routes(app: FastAPI, doors: Doors) -> None:
    """Add, list and read memories."""
    state = doors.state

    @app.post(
        "/v1/memories",
        tags=["memories"],
        status_code=201,
        summary='Store one memory, or a batch as {"memories": [...]}',
        responses=responses(
            201, "Stored (or found identical: created=false).", AddResult, AddResults
        ),
        openapi_extra=body(MemoryIn, AddMemories, examples=ADD_EXAMPLES),
    )
    async def add_memories(request: Request) -> Any:
        who = await doors.caller(request)
        data = await _object(request, 'a memory, or {"memories": [...]}')
        single = "memories" not in data
        batch = data.get("memories")
        if isinstance(batch, list) and len(batch) > state.settings.http_max_batch:
            limit = state.settings.http_max_batch
            raise ApiError(
                422,
                f"{len(batch)} memories in one request, over the limit of {limit}; split the batch",
            )
        add = parse(AddMemories, {"memories": [parse(MemoryIn, data)]} if single else data)
        results = await doors.run(who.engine.run_add, add)
        return doors.answer(results[0] if single else AddResults(tuple(results)), 201)

    @app.get(
        "/v1/memories",
        tags=["memories"],
        summary="List memories with filters",
        responses=responses(200, "Memories, newest first.", MemoryList),
    )
    async def list_memories(
        request: Request,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="How many (1-1000).")] = 50,
        offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
        newest_first: bool = True,
        include_forgotten: bool = False,
        project: str | None = None,
        scope: str | None = None,
        type: Annotated[list[str], Query(description="Only these types (repeat it).")] = [],  # noqa: B006
        tag: Annotated[list[str], Query(description="Only memories with all these tags.")] = [],  # noqa: B006
        session_id: str | None = None,
        superseded_by: Annotated[
            str | None, Query(description="Only the memories this id supersedes.")
        ] = None,
        since: Annotated[str | None, Query(description="ISO date or datetime.")] = None,
        until: Annotated[str | None, Query(description="ISO date or datetime.")] = None,
    ) -> Any:
        who = await doors.caller(request)
        given = dict(
            project=project,
            scope=scope,
            types=type,
            tags=tag,
            session_id=session_id,
            superseded_by=superseded_by,
            since=since,
            until=until,
        )
        filters = {k: v for k, v in given.items() if v not in (None, [])}
        query = parse(
            ListQuery,
            dict(
                limit=limit,
                offset=offset,
                newest_first=newest_first,
                include_forgotten=include_forgotten,
                filters=filters,
            ),
        )
        memories = await doors.run(who.engine.run_list, query)
        return doors.answer(MemoryList(tuple(memories)))

    @app.get(
        "/v1/memories/{memory_id}",
        tags=["memories"],
        summary="One memory",
        responses=responses(200, "The memory.", Memory),
    )
    async def get_memory(request: Request, memory_id: str) -> Any:
        who = await doors.caller(request)
        return doors.answer(await doors.run(who.engine.get, memory_id))


def _memory_changes(app: FastAPI, doors: Doors) -> None:
    """Change, supersede and forget one memory."""

    @app.patch(
        "/v1/memories/{memory_id}",
        tags=["memories"],
        summary="Change fields of a memory (new content is re-embedded)",
        responses=responses(200, "The memory as it is now.", Memory),
        openapi_extra=body(MemoryPatch, examples=[{"content": "Ana arrives on 15 March."}]),
    )
    async def update_memory(request: Request, memory_id: str) -> Any:
        who = await doors.caller(request)
        changes = await _object(request, "the fields to change")
        if not changes:
            raise ApiError(400, NOTHING_TO_CHANGE)
        update = parse(UpdateMemory, {"id": memory_id, "changes": changes})
        return doors.answer(await doors.run(who.engine.run_update, update))

    @app.post(
        "/v1/memories/{memory_id}/supersede",
        tags=["memories"],
        summary="Mark a memory as no longer current: replaced by another, or valid "
        "until a time (clear: current again)",
        responses=responses(200, "The memory as it is now.", Memory),
        openapi_extra=body(
            SupersedeMark, examples=[{"by": "NEWER_ID"}, {"until": "2026-05-01"}, {"clear": True}]
        ),
    )
    async def supersede_memory(request: Request, memory_id: str) -> Any:
        who = await doors.caller(request)
        mark = parse(SupersedeMark, await _object(request, "by, until or clear"))
        job = parse(SupersedeMemory, {"id": memory_id, **mark.model_dump(exclude_unset=True)})
        return doors.answer(await doors.run(who.engine.run_supersede, job))

    @app.delete(
        "/v1/memories/{memory_id}",
        tags=["memories"],
        summary="Forget a memory (hidden from search; hard=true deletes it)",
        responses=responses(200, "How many changed.", ForgetResult),
    )
    async def forget_memory(request: Request, memory_id: str, hard: bool = False) -> Any:
        who = await doors.caller(request)
        forget = parse(ForgetMemories, {"ids": [memory_id], "hard": hard})
        return doors.answer(ForgetResult(await doors.run(who.engine.run_forget, forget), hard))


SEARCH_EXAMPLES = [
    {"query": "when does my sister arrive?", "limit": 5},
    {"query": "deploy checklist", "filters": {"project": "atlas"}, "explain": True},
]


def _retrieval_routes(app: FastAPI, doors: Doors) -> None:
    """Search, and the context block."""

    @app.post(
        "/v1/search",
        tags=["retrieval"],
        summary="Ranked memories for a question",
        responses=responses(200, "Hits, best first.", SearchResult),
        openapi_extra=body(SearchQuery, examples=SEARCH_EXAMPLES),
    )
    async def search(request: Request) -> Any:
        who = await doors.caller(request)
        query = parse(SearchQuery, await _object(request, "a search"))
        return doors.answer(await doors.search_turn(who.engine.run_search, query))

    @app.post(
        "/v1/context",
        tags=["retrieval"],
        summary="A prompt-ready block of the best memories under a token budget",
        responses=responses(200, "The block and its hits.", Context),
        openapi_extra=body(
            ContextQuery, examples=[{"query": "what do I know about Ana?", "max_tokens": 300}]
        ),
    )
    async def context(request: Request) -> Any:
        who = await doors.caller(request)
        query = parse(ContextQuery, await _object(request, "a context query"))
        return doors.answer(await doors.search_turn(who.engine.run_context, query))


def _bulk_routes(app: FastAPI, doors: Doors) -> None:
    """Import memories or a transcript, and index server folders."""

    @app.post(
        "/v1/import",
        tags=["memories"],
        summary="Import memories (JSONL) or a transcript sent as content",
        responses=responses(200, "What was read and stored.", ImportReport),
        openapi_extra=body(
            ImportRequest,
            examples=[{"format": "memories", "content": '{"content": "first memory"}\n'}],
        ),
    )
    async def import_(request: Request) -> Any:
        who = await doors.caller(request)
        job = parse(ImportRequest, await _object(request, "an import"))
        if job.path is not None and not who.admin:
            raise ApiError(
                403,
                "importing a file on the server needs an admin key; send the file's content "
                "instead",
            )
        return doors.answer(await doors.run(who.engine.run_import, job))

    @app.post(
        "/v1/index",
        tags=["memories"],
        summary="Index markdown folders on the server (admin keys only)",
        responses=responses(200, "What the run indexed.", IndexReport),
        openapi_extra=body(IndexBody, examples=[{"paths": ["/srv/notes"]}]),
    )
    async def index(request: Request) -> Any:
        who = await doors.caller(request)
        if not who.admin:
            raise ApiError(403, "indexing server folders needs an admin key")
        data = await _object(request, "paths to index")
        try:
            found = TypeAdapter(IndexBody).validate_python(data, strict=False)
        except ValueError as exc:
            errors: list[Any] = getattr(exc, "errors", list)()
            raise InvalidInputError(describe_errors(errors) if errors else str(exc)) from None

        def job() -> Any:
            return who.engine.index(
                list(found.paths),
                globs=found.globs,
                force=found.force,
                name=found.name,
                context=found.context,
            )

        return doors.answer(await doors.run(job))
