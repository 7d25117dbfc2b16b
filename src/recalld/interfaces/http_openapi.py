"""The HTTP API's OpenAPI document: the answers' and bodies' schemas (from the records and
the request models), every operation's documented errors, and the limits of the settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from recalld.config import Settings
from recalld.engine import Status
from recalld.interfaces.openapi_limits import declare_limits
from recalld.records import AddResult, Context, Memory, SearchResult
from recalld.requests import (
    AddMemories,
    ContextQuery,
    Filters,
    ImportRequest,
    MemoryIn,
    MemoryPatch,
    SearchQuery,
    SupersedeMark,
)

DOCUMENTED_ERRORS = (400, 401, 403, 404, 409, 413, 415, 421, 422, 429, 503)
"""The refusals every operation documents (405 and 500 are nobody's to plan for)."""


@dataclass(frozen=True)
class ErrorDetail:
    """What went wrong, in the one error shape."""

    code: str
    """``bad_request``, ``unauthorized``, ``forbidden``, ``not_found``, ``conflict``,
    ``too_large``, ``invalid_input``, ``rate_limited`` or ``unavailable``."""
    message: str
    """What went wrong and what to do about it."""


@dataclass(frozen=True)
class ErrorBody:
    """Every refusal's body."""

    error: ErrorDetail


@dataclass(frozen=True)
class AddResults:
    """The answer to a batch of memories, in the order sent."""

    results: tuple[AddResult, ...]


@dataclass(frozen=True)
class MemoryList:
    """A page of memories."""

    memories: tuple[Memory, ...]


@dataclass(frozen=True)
class ForgetResult:
    """How many memories a forget changed, and whether it deleted them."""

    forgotten: int
    hard: bool


@dataclass(frozen=True)
class Health:
    """The liveness answer: the server is up, at this version."""

    status: str
    version: str


@dataclass(frozen=True)
class IndexBody:
    """Folders or files on the server to index (admin keys only)."""

    paths: tuple[str, ...] = ()
    globs: tuple[str, ...] | None = None
    force: bool = False


def _schemas() -> dict[str, Any]:
    from recalld.sources.importer import ImportReport
    from recalld.sources.indexer import IndexReport

    named: list[tuple[str, Any, str]] = [
        ("Memory", Memory, "serialization"),
        ("AddResult", AddResult, "serialization"),
        ("AddResults", AddResults, "serialization"),
        ("MemoryList", MemoryList, "serialization"),
        ("ForgetResult", ForgetResult, "serialization"),
        ("SearchResult", SearchResult, "serialization"),
        ("Context", Context, "serialization"),
        ("Status", Status, "serialization"),
        ("ImportReport", ImportReport, "serialization"),
        ("IndexReport", IndexReport, "serialization"),
        ("Health", Health, "serialization"),
        ("Error", ErrorBody, "serialization"),
        ("MemoryIn", MemoryIn, "validation"),
        ("AddMemories", AddMemories, "validation"),
        ("MemoryPatch", MemoryPatch, "validation"),
        ("SearchQuery", SearchQuery, "validation"),
        ("ContextQuery", ContextQuery, "validation"),
        ("ImportRequest", ImportRequest, "validation"),
        ("IndexBody", IndexBody, "validation"),
        ("Filters", Filters, "validation"),
        ("SupersedeMark", SupersedeMark, "validation"),
    ]
    from recalld.sources.status import SourceStatus

    names = {"SourceStatus": SourceStatus, "ImportReport": ImportReport, "IndexReport": IndexReport}
    inputs = []
    for name, kind, mode in named:
        adapter: TypeAdapter[Any] = TypeAdapter(kind)
        adapter.rebuild(_types_namespace=names)
        inputs.append((name, mode, adapter))
    mapping, definitions = TypeAdapter.json_schemas(
        inputs,  # type: ignore[arg-type]
        ref_template="#/components/schemas/{model}",
    )
    schemas: dict[str, Any] = dict(definitions.get("$defs", {}))
    for (name, _mode), schema in mapping.items():
        if "$ref" in schema and len(schema) == 1:
            target = schema["$ref"].rsplit("/", 1)[-1]
            if target != name:
                schemas[name] = schemas[target]
        else:
            schemas[name] = schema
    # A datetime field's value is an ISO string: no validator needs more than that.
    return schemas


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def responses(ok: int, schema: dict[str, Any], description: str) -> dict[int | str, Any]:
    answers: dict[int | str, Any] = {
        ok: {"description": description, "content": {"application/json": {"schema": schema}}}
    }
    reasons = {
        400: "The body is not JSON (or a header is malformed).",
        401: "No key, or an invalid or revoked one.",
        403: "The key may not do this (without keys: a cross-site request).",
        404: "Unknown id (another tenant's ids are unknown too).",
        409: "The id exists with other content.",
        413: "Body too large.",
        415: "The body is not sent as application/json.",
        421: "Without API keys: the Host header is not a loopback name or address.",
        422: "Invalid input; the message says which field and why.",
        429: "Over the key's rate limit; see Retry-After.",
        503: "The store or the embedder is unavailable.",
    }
    for status in DOCUMENTED_ERRORS:
        answers[status] = {
            "description": reasons[status],
            "content": {"application/json": {"schema": ref("Error")}},
        }
    return answers


def body(schema: dict[str, Any], examples: Sequence[Any] = ()) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if examples:
        media["examples"] = {f"example{i + 1}": {"value": v} for i, v in enumerate(examples)}
    return {"requestBody": {"required": True, "content": {"application/json": media}}}


def openapi_document(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """The document of ``app``'s routes, built once and kept on the app."""
    if app.openapi_schema is None:
        spec = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        spec.setdefault("components", {}).setdefault("schemas", {}).update(_schemas())
        declare_limits(spec, settings)
        spec["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        spec["security"] = [{"bearer": []}]
        app.openapi_schema = spec
    return app.openapi_schema
