"""The HTTP API's routes for indexed files: named collections (``/v1/collections``) and
their files by path or glob (``/v1/files``). Thin, as :mod:`.http_routes`' are: parse one
request model, call one engine method, answer with :mod:`recalld.serialize`'s JSON."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from fastapi import FastAPI, Request

from recalld.interfaces.auth import Caller
from recalld.interfaces.exposure import HIDDEN
from recalld.interfaces.http_openapi import body, responses
from recalld.records import Collection, FileSet
from recalld.requests import GetFiles, SetContext, parse

ReadObject = Callable[[Request, str], Awaitable[dict[str, Any]]]
"""Reads a request's body as a JSON object (``what`` it should hold, for the refusal)."""


class Doors(Protocol):
    """What these routes need of the server (:class:`~.http_routes.Doors`)."""

    def answer(self, value: Any, status: int = 200) -> Any: ...

    async def caller(self, request: Request) -> Caller: ...

    async def run(self, function: Callable[..., Any], *args: Any) -> Any: ...


FILES_ANSWER = "The files (none, with a note, for a glob that matches nothing)."
CONTEXT_EXAMPLES = [{"text": "Work documentation"}, {"path": "api", "text": "API reference"}]


@dataclass(frozen=True)
class CollectionList:
    """The tenant's collections, by name (the folders are shown to admin keys only)."""

    collections: tuple[Collection, ...]


@dataclass(frozen=True)
class Removed:
    """A collection forgotten, and how many chunks went with it."""

    removed: str
    chunks_deleted: int


def _shown(found: list[Collection], admin: bool) -> CollectionList:
    """The list, without the server's folders for a key that is not an admin's."""
    return CollectionList(tuple(c if admin else replace(c, path=HIDDEN) for c in found))


def install_file_routes(app: FastAPI, doors: Doors, read_object: ReadObject) -> None:
    """The collections' and files' routes on ``app``; bodies are read with ``read_object``."""

    @app.post(
        "/v1/files",
        tags=["files"],
        summary="Indexed files by path or glob, with their text, collection and context",
        responses=responses(200, FILES_ANSWER, FileSet),
        openapi_extra=body(
            GetFiles,
            examples=[{"pattern": "docs/api/auth.md"}, {"pattern": "notes/**/*.md"}],
        ),
    )
    async def get_files(request: Request) -> Any:
        who = await doors.caller(request)
        query = parse(GetFiles, await read_object(request, "a path or glob"))
        return doors.answer(await doors.run(who.engine.run_get_files, query))

    @app.get(
        "/v1/collections",
        tags=["files"],
        summary="The tenant's named collections and their context lines",
        responses=responses(200, "The collections, by name.", CollectionList),
    )
    async def list_collections(request: Request) -> Any:
        who = await doors.caller(request)
        found = await doors.run(who.engine.collections)
        return doors.answer(_shown(found, who.admin))

    @app.put(
        "/v1/collections/{name}/context",
        tags=["files"],
        summary="Set (text null: remove) a collection's context line, or a sub-path's",
        responses=responses(200, "The collection as it now is.", Collection),
        openapi_extra=body(SetContext, examples=CONTEXT_EXAMPLES),
    )
    async def set_context(request: Request, name: str) -> Any:
        who = await doors.caller(request)
        line = parse(SetContext, await read_object(request, "a context line"))

        def job() -> Collection:
            return who.engine.set_context(name, line.text, path=line.path)

        found = await doors.run(job)
        return doors.answer(found if who.admin else replace(found, path=HIDDEN))

    @app.delete(
        "/v1/collections/{name}",
        tags=["files"],
        summary="Forget a collection: its indexed files, their chunks and its lines",
        responses=responses(200, "What was removed.", Removed),
    )
    async def remove_collection(request: Request, name: str) -> Any:
        who = await doors.caller(request)
        deleted = await doors.run(who.engine.remove_collection, name)
        return doors.answer(Removed(name, deleted))
