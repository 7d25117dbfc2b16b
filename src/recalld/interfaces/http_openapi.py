"""The HTTP API's OpenAPI document: the answers' and bodies' schemas (from the records and
the request models), every operation's documented errors, and the limits of the settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from recalld.config import Settings
from recalld.interfaces.openapi_limits import declare_limits
from recalld.records import AddResult, Memory

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
    name: str | None = None
    """Make the one folder a named collection (no paths: re-index that collection)."""
    context: str | None = None
    """The collection's context line (needs ``name``)."""


Mode = Literal["validation", "serialization"]
"""A body's schema is what is accepted (validation), an answer's what is sent."""
ERROR = "Error"
"""The name of the one error shape's schema (of :class:`ErrorBody`)."""
_components: dict[str, tuple[Any, Mode]] = {ERROR: (ErrorBody, "serialization")}
"""Every type a route's body or answer names, by its schema's name: the document's
components are generated from these, so a route names a type, never a schema by hand."""


def component(kind: Any, mode: Mode) -> dict[str, str]:
    """A reference to the schema of ``kind`` (a request model or a record), which the
    document's components then hold, named after the type."""
    name = ERROR if kind is ErrorBody else kind.__name__
    _components[name] = (kind, mode)
    return {"$ref": f"#/components/schemas/{name}"}


def _one_of(kinds: Sequence[Any], mode: Mode) -> dict[str, Any]:
    refs = [component(kind, mode) for kind in kinds]
    return refs[0] if len(refs) == 1 else {"anyOf": refs}


def _schemas() -> dict[str, Any]:
    """The schemas of every declared component (and of the models they hold), generated
    from the types: the request models as they validate, the records as they serialize."""
    from recalld.sources.importer import ImportReport
    from recalld.sources.indexer import IndexReport
    from recalld.sources.status import SourceStatus

    names = {"SourceStatus": SourceStatus, "ImportReport": ImportReport, "IndexReport": IndexReport}
    inputs = []
    for name, (kind, mode) in _components.items():
        adapter: TypeAdapter[Any] = TypeAdapter(kind)
        adapter.rebuild(_types_namespace=names)
        inputs.append((name, mode, adapter))
    mapping, definitions = TypeAdapter.json_schemas(
        inputs,
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
    return schemas


def responses(ok: int, description: str, *kinds: Any) -> dict[int | str, Any]:
    """An operation's answers: ``ok`` with one of ``kinds``, and every documented error."""
    schema = _one_of(kinds, "serialization")
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
            "content": {"application/json": {"schema": component(ErrorBody, "serialization")}},
        }
    return answers


def body(*kinds: Any, examples: Sequence[Any] = ()) -> dict[str, Any]:
    """An operation's JSON body: one of the request models ``kinds`` (read by hand, so the
    document says what the route's :func:`~recalld.requests.parse` accepts)."""
    media: dict[str, Any] = {"schema": _one_of(kinds, "validation")}
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
