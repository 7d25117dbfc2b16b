"""``recalld serve``: the HTTP API, a thin adapter over the request objects.

Every request body is turned into one of :mod:`recalld.requests`' objects by
:func:`recalld.requests.parse` (the same check and the same message as the library, the
CLI and MCP), run by the caller's tenant engine in a worker thread, and answered with
:mod:`recalld.serialize`'s JSON. Errors have one shape, ``{"error": {"code", "message"}}``.

Authentication: ``Authorization: Bearer rk_...`` keys kept hashed in the store
(:mod:`recalld.keys`). A key confines every request to its tenant (and the shared
namespaces it names): another tenant's id is an unknown id. While no key exists, the
server answers without one, and only on a loopback address.

Other ASGI apps (the MCP server) are mounted with ``create_app(..., extensions=[...])``:
each extension is built from the :class:`ServerState` (for its engines and
:meth:`ServerState.authenticate`) and may bring a lifespan.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import recalld
from recalld import heap, keys as api_keys
from recalld.config import Settings
from recalld.engine import MemoryEngine, Status, open_engine
from recalld.errors import (
    ConflictError,
    EmbedderError,
    InvalidInputError,
    NotFoundError,
    RecalldError,
    StoreError,
)
from recalld.interfaces.exposure import KEYLESS_WARNING, public_message, public_status
from recalld.interfaces.inspector import install_inspector
from recalld.interfaces.openapi_limits import declare_limits
from recalld.providers.embedders import Embedder, resolve_embedder
from recalld.records import AddResult, ApiKey, Context, Memory, SearchResult
from recalld.request_limits import MAX_RESPONSE_BYTES
from recalld.requests import (
    NOTHING_TO_CHANGE,
    AddMemories,
    ContextQuery,
    Filters,
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
from recalld.retrieval.models import Models
from recalld.serialize import to_json

log = logging.getLogger("recalld.http")

ERROR_CODES: Mapping[int, str] = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 413: "too_large",
    415: "unsupported_media_type", 421: "misdirected", 422: "invalid_input",
    429: "rate_limited", 500: "internal", 503: "unavailable",
}  # fmt: skip
DOCUMENTED_ERRORS = (400, 401, 403, 404, 409, 413, 415, 421, 422, 429, 503)
MAX_PAGE = 1000
"""The most memories ``GET /v1/memories`` returns a page."""
FAILED_AUTH_PER_MINUTE = 60
"""Refused keys a client address may send a minute (in bursts of as many) before it gets
429: a client with a real key rarely fails twice, one guessing keys fails thousands of
times."""


# -- errors ----------------------------------------------------------------------------------


class ApiError(Exception):
    """An answer other than success, in the one error shape."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Any:
    body = {"error": {"code": ERROR_CODES.get(status, "error"), "message": message}}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def status_of(exc: RecalldError) -> int:
    """The HTTP status of one of recalld's errors."""
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, InvalidInputError):
        return 422
    if isinstance(exc, StoreError | EmbedderError):
        return 503
    return 503


def _install_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.message, exc.headers)

    async def recalld_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, RecalldError)
        return error_response(status_of(exc), public_message(exc))

    async def validation_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(400, "the request body is not valid JSON")
        return error_response(422, describe_errors(errors, skip=("body", "query", "path")))

    async def http_error(request: Request, exc: Exception) -> Any:
        assert isinstance(exc, StarletteHTTPException)
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        headers = dict(exc.headers or {})
        if exc.status_code == 404:
            message = f"no such resource: {request.method} {request.url.path}"
        if exc.status_code == 405:
            allowed = _methods_of(request.app, request.scope)
            headers["Allow"] = ", ".join(allowed)
            message = f"{request.method} is not allowed here; use {' or '.join(allowed)}"
        return error_response(exc.status_code, message, headers)

    async def unexpected(request: Request, exc: Exception) -> Any:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal error ({type(exc).__name__}); see the server log")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RecalldError, recalld_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                            and media.endswith("+json"))  # fmt: skip


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in a JSON text, read without parsing it (brackets
    inside strings do not count): linear, and a few milliseconds for megabytes."""
    bare = _JSON_STRING.sub(b"", raw)
    if bare.count(b"[") + bare.count(b"{") <= 1:
        return int(b"[" in bare or b"{" in bare)
    import numpy as np

    step = np.zeros(256, dtype=np.int8)  # +1 for an opening bracket, -1 for a closing one
    step[[ord("["), ord("{")]], step[[ord("]"), ord("}")]] = 1, -1
    return int(np.cumsum(step[np.frombuffer(bare, dtype=np.uint8)], dtype=np.int32).max())


def _methods_of(app: FastAPI, scope: Scope) -> list[str]:
    """Every method the routes of this path answer (a 405's ``Allow``): Starlette names only
    those of the first route that matched the path."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches({**scope, "method": "GET"})
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods - {"HEAD"})


class BodyLimit:
    """What every route may be sent, checked before any of them parses a body: JSON only
    (415; the content types a web page may send without asking first, ``text/plain`` and
    forms, never reach a route), at most ``limit`` bytes (413, by the declared length or as
    the body arrives) and nested at most ``depth`` levels (400)."""

    def __init__(self, app: ASGIApp, limit: int, depth: int) -> None:
        self.app = app
        self.limit = limit
        self.depth = depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        if declared in (None, "0") and "transfer-encoding" not in headers:
            await self.app(scope, receive, send)
            return
        refusal = self._refuse_headers(headers.get("content-type"), declared)
        body = b""
        if refusal is None:
            read = await self._read(receive)
            if read is None:
                refusal = 413, self._too_large
            elif json_depth(read) > self.depth:
                refusal = 400, f"the request body nests deeper than {self.depth} levels"
            body = read or b""
        if refusal is not None:
            await error_response(*refusal)(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _refuse_headers(self, content_type: str | None, declared: str | None) -> (
            tuple[int, str] | None):  # fmt: skip
        if not _is_json(content_type):
            return 415, ("the request body must be JSON: send 'Content-Type: application/json' "
                         f"(got {content_type or 'none'})")  # fmt: skip
        if declared is not None and not declared.isdigit():
            return 400, "invalid Content-Length header"
        if declared is not None and int(declared) > self.limit:
            return 413, self._too_large
        return None

    @property
    def _too_large(self) -> str:
        return f"the request body is larger than {self.limit} bytes"

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None once it passes the limit (or the client left)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


# -- the server's state: engines per tenant, keys, rate limits ---------------------------------


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _authority(value: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``Host`` header or an origin's ``host[:port]``; None if malformed."""
    try:
        parts = urlsplit(f"//{value}")
        return (parts.hostname or "", parts.port) if parts.hostname else None
    except ValueError:
        return None


def local_refusal(headers: Headers, bound: str) -> tuple[int, str] | None:
    """Why a request may come from a web page rather than a local program, or None.

    A server without API keys answers whoever reaches it, and a page in the user's browser
    reaches loopback too: directly (its ``Origin`` then names the page's site) or by DNS
    rebinding (its ``Host`` then names the attacker's domain). So the ``Host`` must be a
    loopback name or address or the address the server listens on (``bound``), and an
    ``Origin``, when sent, must be this very server (same scheme-less host and port).
    """
    host = headers.get("host")
    where = _authority(host) if host else None
    if host is not None and (where is None or not (
            is_loopback(where[0]) or where[0] == bound.strip("[]").lower())):  # fmt: skip
        return 421, (f"Host {host!r} is not this server's address: without API keys it "
                     "answers only on loopback (create a key with `recalld keys create` to "
                     "serve other names)")  # fmt: skip
    origin = headers.get("origin")
    if origin is not None:
        parts = urlsplit(origin)
        same = (parts.scheme in ("http", "https") and host is not None
                and _authority(parts.netloc) == where)  # fmt: skip
        if not same:
            return 403, (f"cross-site request from {origin} refused: without API keys only "
                         "pages this server serves may call it")  # fmt: skip
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return 403, (f"cross-site request refused (Sec-Fetch-Site: {site}): without API keys "
                     "only pages this server serves may call it")  # fmt: skip
    return None


class LocalGuard:
    """ASGI middleware on every route (``/v1``, ``/mcp``, the docs): while no API key
    exists, refuse what :func:`local_refusal` finds (421 or 403). Requests that pass are
    not slowed: the key count is read only for a suspect one."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = local_refusal(Headers(scope=scope), self.state.host)
            if refusal is not None and await run_in_threadpool(self.state.active_keys) == 0:
                await error_response(*refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class RateLimiter:
    """A token bucket per key: ``per_minute`` requests a minute, bursts of as many."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, who: str) -> float:
        """0 when the request may go ahead, else the seconds until it may."""
        if self.per_minute <= 0:
            return 0.0
        rate = self.per_minute / 60.0
        with self._lock:
            now = self._clock()
            tokens, then = self._buckets.get(who, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - then) * rate)
            if tokens >= 1.0:
                self._buckets[who] = (tokens - 1.0, now)
                return 0.0
            self._buckets[who] = (tokens, now)
            return (1.0 - tokens) / rate


@dataclass(frozen=True)
class Caller:
    """Who is asking: the key (None when the server runs without keys) and its engine."""

    key: ApiKey | None
    engine: MemoryEngine

    @property
    def admin(self) -> bool:
        return self.key is None or self.key.admin


class ServerState:
    """What the app shares across requests: one embedder, one engine per tenant grant."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        *,
        models: Models | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.settings = settings
        self.embedder = embedder
        self.models = models
        self.host = host
        self.limiter = RateLimiter(settings.http_rate_limit)
        self.failures = RateLimiter(FAILED_AUTH_PER_MINUTE)
        self._engines: dict[tuple[str, tuple[str, ...]], MemoryEngine] = {}
        self._lock = threading.Lock()
        self.engine_for(settings.tenant, settings.shared)  # opens the store: fail early

    @property
    def root(self) -> MemoryEngine:
        """The engine of the settings' own tenant: it reads the keys, and serves callers
        when no key exists."""
        return self.engine_for(self.settings.tenant, self.settings.shared)

    def engine_for(self, tenant: str, shared: Sequence[str] = ()) -> MemoryEngine:
        """The engine of a tenant grant, opened on first use and kept."""
        grant = (tenant, tuple(shared))
        with self._lock:
            engine = self._engines.get(grant)
            if engine is None:
                settings = self.settings.model_copy(update={"tenant": tenant,
                                                            "shared": tuple(shared)})  # fmt: skip
                engine = open_engine(settings=settings, embedder=self.embedder,
                                     models=self.models)  # fmt: skip
                self._engines[grant] = engine
            return engine

    def active_keys(self) -> int:
        return api_keys.key_store(self.root.store).active_keys()

    def authenticate(self, authorization: str | None, client: str = "") -> Caller:
        """The caller of a request with this ``Authorization`` header, from ``client`` (its
        address: refused keys are counted per address).

        Raises:
            ApiError: 401 (no key, or an invalid or revoked one), 429 (over the rate, or
                too many refused keys from this address).
        """
        try:
            return self._authenticate(authorization)
        except ApiError as exc:
            if exc.status == 401 and authorization and self.failures.take(client) > 0:
                raise ApiError(429, f"too many refused keys from this address (over "
                               f"{FAILED_AUTH_PER_MINUTE} a minute); retry in a minute",
                               {"Retry-After": "60"}) from None  # fmt: skip
            raise

    def _authenticate(self, authorization: str | None) -> Caller:
        if not authorization:
            if self.active_keys() == 0 and is_loopback(self.host):
                self._limit("local")
                return Caller(None, self.root)
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>' (create "
                           "one with `recalld keys create --tenant NAME`)",
                           {"WWW-Authenticate": "Bearer"})  # fmt: skip
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "the Authorization header must read 'Bearer <key>'",
                           {"WWW-Authenticate": "Bearer"})  # fmt: skip
        verdict = api_keys.verify(self.root.store, token.strip())
        if verdict.key is None:
            raise ApiError(401, verdict.reason, {"WWW-Authenticate": "Bearer"})
        self._limit(verdict.key.id)
        return Caller(verdict.key, self.engine_for(verdict.key.tenant, verdict.key.shared))

    def _limit(self, who: str) -> None:
        wait = self.limiter.take(who)
        if wait > 0:
            seconds = max(1, int(wait + 0.999))
            raise ApiError(429, f"rate limit of {self.settings.http_rate_limit} requests a "
                           f"minute reached; retry in {seconds} s",
                           {"Retry-After": str(seconds)})  # fmt: skip

    def close(self) -> None:
        """Close every engine (the app's shutdown); a later request opens them again."""
        with self._lock:
            for engine in self._engines.values():
                engine.close()
            self._engines.clear()


@dataclass(frozen=True)
class Extension:
    """Another ASGI app served under ``path`` (e.g. the MCP server under ``/mcp``)."""

    path: str
    app: ASGIApp
    lifespan: Callable[[], AbstractAsyncContextManager[Any]] | None = None


ExtensionFactory = Callable[[ServerState], Extension]


# -- OpenAPI ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorDetail:
    code: str
    """``bad_request``, ``unauthorized``, ``forbidden``, ``not_found``, ``conflict``,
    ``too_large``, ``invalid_input``, ``rate_limited`` or ``unavailable``."""
    message: str
    """What went wrong and what to do about it."""


@dataclass(frozen=True)
class ErrorBody:
    error: ErrorDetail


@dataclass(frozen=True)
class AddResults:
    results: tuple[AddResult, ...]


@dataclass(frozen=True)
class MemoryList:
    memories: tuple[Memory, ...]


@dataclass(frozen=True)
class ForgetResult:
    forgotten: int
    hard: bool


@dataclass(frozen=True)
class Health:
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
        ("Memory", Memory, "serialization"), ("AddResult", AddResult, "serialization"),
        ("AddResults", AddResults, "serialization"), ("MemoryList", MemoryList, "serialization"),
        ("ForgetResult", ForgetResult, "serialization"),
        ("SearchResult", SearchResult, "serialization"), ("Context", Context, "serialization"),
        ("Status", Status, "serialization"), ("ImportReport", ImportReport, "serialization"),
        ("IndexReport", IndexReport, "serialization"), ("Health", Health, "serialization"),
        ("Error", ErrorBody, "serialization"), ("MemoryIn", MemoryIn, "validation"),
        ("AddMemories", AddMemories, "validation"), ("MemoryPatch", MemoryPatch, "validation"),
        ("SearchQuery", SearchQuery, "validation"), ("ContextQuery", ContextQuery, "validation"),
        ("ImportRequest", ImportRequest, "validation"), ("IndexBody", IndexBody, "validation"),
        ("Filters", Filters, "validation"), ("SupersedeMark", SupersedeMark, "validation"),
    ]  # fmt: skip
    from recalld.sources.status import SourceStatus

    names = {"SourceStatus": SourceStatus, "ImportReport": ImportReport,
             "IndexReport": IndexReport}  # fmt: skip
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


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _responses(ok: int, schema: dict[str, Any], description: str) -> dict[int | str, Any]:
    answers: dict[int | str, Any] = {
        ok: {"description": description, "content": {"application/json": {"schema": schema}}}
    }
    reasons = {
        400: "The body is not JSON (or a header is malformed).",
        401: "No key, or an invalid or revoked one.",
        403: "The key may not do this (without keys: a cross-site request).",
        404: "Unknown id (another tenant's ids are unknown too).",
        409: "The id exists with other content.", 413: "Body too large.",
        415: "The body is not sent as application/json.",
        421: "Without API keys: the Host header is not a loopback name or address.",
        422: "Invalid input; the message says which field and why.",
        429: "Over the key's rate limit; see Retry-After.",
        503: "The store or the embedder is unavailable.",
    }  # fmt: skip
    for status in DOCUMENTED_ERRORS:
        answers[status] = {"description": reasons[status],
                           "content": {"application/json": {"schema": _ref("Error")}}}  # fmt: skip
    return answers


def _body(schema: dict[str, Any], examples: Sequence[Any] = ()) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if examples:
        media["examples"] = {f"example{i + 1}": {"value": v} for i, v in enumerate(examples)}
    return {"requestBody": {"required": True, "content": {"application/json": media}}}


# -- the app -----------------------------------------------------------------------------------


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "the request body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON") from None


def _object(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ApiError(422, f"the body must be a JSON object ({what})")
    return data


def _json(value: Any, status: int = 200) -> Any:
    """``value`` as a JSON answer, or 422 when it is larger than the answers' limit."""
    response = JSONResponse(to_json(value), status_code=status)
    if len(response.body) > MAX_RESPONSE_BYTES:
        raise ApiError(422, f"the answer would be {len(response.body):,} bytes, over the "
                       f"limit of {MAX_RESPONSE_BYTES:,}: ask for fewer hits or memories "
                       "(limit)")  # fmt: skip
    return response


def create_app(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    models: Models | None = None,
    host: str = "127.0.0.1",
    extensions: Sequence[ExtensionFactory] = (),
    local_secret: str | None = None,
) -> FastAPI:
    """The HTTP API over the store of ``settings``.

    Args:
        settings: the store, limits (``http_*``) and the tenant served without keys.
        embedder: the embedder every tenant shares; default: the settings' one, loaded
            once when the app is made.
        models: an LLM and / or reranker shared by every tenant.
        host: the address the server listens on; without API keys, only a loopback
            address is served.
        extensions: other ASGI apps to mount (see :class:`Extension`).
        local_secret: the secret of the server's discovery record, which it proves to
            the shell (:mod:`recalld.interfaces.local_proof`); None when not advertised.
    """
    state = ServerState(settings, embedder or resolve_embedder(settings.embedder, settings),
                        models=models, host=host)  # fmt: skip
    mounted = [make(state) for make in extensions]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for extension in mounted:
                if extension.lifespan is not None:
                    await stack.enter_async_context(extension.lifespan())
            try:
                yield
            finally:
                await run_in_threadpool(state.close)

    app = FastAPI(
        title="recalld",
        version=recalld.__version__,
        description="Memory retrieval for AI agents: store what an agent learns, get back the "
        "few memories that answer a question. Authenticate with `Authorization: Bearer KEY` "
        '(`recalld keys create`). Errors: `{"error": {"code", "message"}}`. Bodies are JSON '
        "(`Content-Type: application/json`); no text may hold a NUL character (U+0000).",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: our own page works offline
        redoc_url=None,
    )
    app.state.recalld = state
    app.add_middleware(BodyLimit, limit=settings.http_max_body_bytes,
                       depth=settings.http_max_json_depth)  # fmt: skip
    app.add_middleware(LocalGuard, state=state)  # outermost: before anything reads the body
    if local_secret is not None:
        from recalld.interfaces.local_proof import LocalProof

        app.add_middleware(LocalProof, secret=local_secret)
    _install_error_handlers(app)
    _routes(app, state)
    install_inspector(app)
    for extension in mounted:
        app.mount(extension.path, extension.app)
    schemas = _schemas()

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version,
                               description=app.description, routes=app.routes)  # fmt: skip
            spec.setdefault("components", {}).setdefault("schemas", {}).update(schemas)
            declare_limits(spec, settings)
            spec["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            spec["security"] = [{"bearer": []}]
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/docs", include_in_schema=False)
    async def docs() -> Any:
        from recalld.interfaces.api_docs import POLICY, render

        return HTMLResponse(render(app.openapi()), headers={"Content-Security-Policy": POLICY})

    return app


def _routes(app: FastAPI, state: ServerState) -> None:  # noqa: C901 - one place for the routes
    async def caller(request: Request) -> Caller:
        header = request.headers.get("authorization")
        client = request.client.host if request.client else ""
        return await run_in_threadpool(state.authenticate, header, client)

    async def run(function: Callable[..., Any], *args: Any) -> Any:
        return await run_in_threadpool(function, *args)

    searching = asyncio.Semaphore(
        state.settings.http_search_concurrency or 2 * (os.cpu_count() or 1)
    )

    async def search_turn(function: Callable[..., Any], *args: Any) -> Any:
        """``function`` on a worker thread once one of the search turns is free."""
        async with searching:
            return await run_in_threadpool(function, *args)

    @app.get("/healthz", tags=["server"], summary="Liveness (no key needed)",
             responses=_responses(200, _ref("Health"), "The server is up."),
             openapi_extra={"security": []})  # fmt: skip
    async def healthz() -> Any:
        return _json(Health("ok", recalld.__version__))

    @app.post("/v1/memories", tags=["memories"], status_code=201,
              summary="Store one memory, or a batch as {\"memories\": [...]}",
              responses=_responses(201, {"anyOf": [_ref("AddResult"), _ref("AddResults")]},
                                   "Stored (or found identical: created=false)."),
              openapi_extra=_body({"anyOf": [_ref("MemoryIn"), _ref("AddMemories")]}, [
                  {"content": "My sister Ana arrives on 14 March.", "tags": ["family"]},
                  {"memories": [{"content": "I moved to Berlin in March 2024."},
                                {"content": "Prefers tea over coffee.", "type": "insight"}]},
              ]))  # fmt: skip
    async def add_memories(request: Request) -> Any:
        who = await caller(request)
        data = _object(await _json_body(request), 'a memory, or {"memories": [...]}')
        single = "memories" not in data
        batch = data.get("memories")
        if isinstance(batch, list) and len(batch) > state.settings.http_max_batch:
            limit = state.settings.http_max_batch
            raise ApiError(422, f"{len(batch)} memories in one request, over the limit of "
                           f"{limit}; split the batch")  # fmt: skip
        add = parse(AddMemories, {"memories": [parse(MemoryIn, data)]} if single else data)
        results = await run(who.engine.run_add, add)
        return _json(results[0] if single else AddResults(tuple(results)), 201)

    @app.get(
        "/v1/memories",
        tags=["memories"],
        summary="List memories with filters",
        responses=_responses(200, _ref("MemoryList"), "Memories, newest first."),
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
        who = await caller(request)
        filters = {k: v for k, v in dict(project=project, scope=scope, types=type, tags=tag,
                   session_id=session_id, superseded_by=superseded_by, since=since,
                   until=until).items()
                   if v not in (None, [])}  # fmt: skip
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
        memories = await run(who.engine.run_list, query)
        return _json(MemoryList(tuple(memories)))

    @app.get(
        "/v1/memories/{memory_id}",
        tags=["memories"],
        summary="One memory",
        responses=_responses(200, _ref("Memory"), "The memory."),
    )
    async def get_memory(request: Request, memory_id: str) -> Any:
        who = await caller(request)
        return _json(await run(who.engine.get, memory_id))

    @app.patch("/v1/memories/{memory_id}", tags=["memories"],
               summary="Change fields of a memory (new content is re-embedded)",
               responses=_responses(200, _ref("Memory"), "The memory as it is now."),
               openapi_extra=_body(_ref("MemoryPatch"),
                                   [{"content": "Ana arrives on 15 March."}]))  # fmt: skip
    async def update_memory(request: Request, memory_id: str) -> Any:
        who = await caller(request)
        changes = _object(await _json_body(request), "the fields to change")
        if not changes:
            raise ApiError(400, NOTHING_TO_CHANGE)
        update = parse(UpdateMemory, {"id": memory_id, "changes": changes})
        return _json(await run(who.engine.run_update, update))

    @app.post("/v1/memories/{memory_id}/supersede", tags=["memories"],
              summary="Mark a memory as no longer current: replaced by another, or valid "
              "until a time (clear: current again)",
              responses=_responses(200, _ref("Memory"), "The memory as it is now."),
              openapi_extra=_body(_ref("SupersedeMark"), [{"by": "NEWER_ID"},
                                  {"until": "2026-05-01"}, {"clear": True}]))  # fmt: skip
    async def supersede_memory(request: Request, memory_id: str) -> Any:
        who = await caller(request)
        mark = parse(SupersedeMark, _object(await _json_body(request), "by, until or clear"))
        job = parse(SupersedeMemory, {"id": memory_id, **mark.model_dump(exclude_unset=True)})
        return _json(await run(who.engine.run_supersede, job))

    @app.delete(
        "/v1/memories/{memory_id}",
        tags=["memories"],
        summary="Forget a memory (hidden from search; hard=true deletes it)",
        responses=_responses(200, _ref("ForgetResult"), "How many changed."),
    )
    async def forget_memory(request: Request, memory_id: str, hard: bool = False) -> Any:
        who = await caller(request)
        forget = parse(ForgetMemories, {"ids": [memory_id], "hard": hard})
        return _json(ForgetResult(await run(who.engine.run_forget, forget), hard))

    @app.post("/v1/search", tags=["retrieval"], summary="Ranked memories for a question",
              responses=_responses(200, _ref("SearchResult"), "Hits, best first."),
              openapi_extra=_body(_ref("SearchQuery"), [
                  {"query": "when does my sister arrive?", "limit": 5},
                  {"query": "deploy checklist", "filters": {"project": "atlas"},
                   "explain": True},
              ]))  # fmt: skip
    async def search(request: Request) -> Any:
        who = await caller(request)
        query = parse(SearchQuery, _object(await _json_body(request), "a search"))
        return _json(await search_turn(who.engine.run_search, query))

    @app.post("/v1/context", tags=["retrieval"],
              summary="A prompt-ready block of the best memories under a token budget",
              responses=_responses(200, _ref("Context"), "The block and its hits."),
              openapi_extra=_body(_ref("ContextQuery"),
                                  [{"query": "what do I know about Ana?",
                                    "max_tokens": 300}]))  # fmt: skip
    async def context(request: Request) -> Any:
        who = await caller(request)
        query = parse(ContextQuery, _object(await _json_body(request), "a context query"))
        return _json(await search_turn(who.engine.run_context, query))

    @app.get(
        "/v1/status",
        tags=["server"],
        summary="The tenant's store: counts, embedder (the store's location and indexed "
        "folders for admin keys only)",
        responses=_responses(200, _ref("Status"), "Counts and facts."),
    )
    async def status(request: Request) -> Any:
        who = await caller(request)
        found = await run(who.engine.status)
        return _json(found if who.admin else public_status(found))

    @app.post("/v1/import", tags=["memories"],
              summary="Import memories (JSONL) or a transcript sent as content",
              responses=_responses(200, _ref("ImportReport"), "What was read and stored."),
              openapi_extra=_body(_ref("ImportRequest"), [
                  {"format": "memories", "content": "{\"content\": \"first memory\"}\n"},
              ]))  # fmt: skip
    async def import_(request: Request) -> Any:
        who = await caller(request)
        job = parse(ImportRequest, _object(await _json_body(request), "an import"))
        if job.path is not None and not who.admin:
            raise ApiError(403, "importing a file on the server needs an admin key; send the "
                           "file's content instead")  # fmt: skip
        return _json(await run(who.engine.run_import, job))

    @app.post(
        "/v1/index",
        tags=["memories"],
        summary="Index markdown folders on the server (admin keys only)",
        responses=_responses(200, _ref("IndexReport"), "What the run indexed."),
        openapi_extra=_body(_ref("IndexBody"), [{"paths": ["/srv/notes"]}]),
    )
    async def index(request: Request) -> Any:
        who = await caller(request)
        if not who.admin:
            raise ApiError(403, "indexing server folders needs an admin key")
        data = _object(await _json_body(request), "paths to index")
        try:
            body = TypeAdapter(IndexBody).validate_python(data, strict=False)
        except ValueError as exc:
            errors: list[Any] = getattr(exc, "errors", list)()
            raise InvalidInputError(describe_errors(errors) if errors else str(exc)) from None

        def job() -> Any:
            return who.engine.index(list(body.paths), globs=body.globs, force=body.force)

        return _json(await run(job))


def serve(
    settings: Settings,
    host: str,
    port: int,
    *,
    say: Callable[[str], None] = print,
    extensions: Sequence[ExtensionFactory] = (),
    access_log: bool = False,
    local_secret: str | None = None,
) -> None:
    """Run the API with uvicorn until interrupted; says what it serves and where, and with
    ``access_log`` writes one line a request (client, request line, status) to stdout."""
    import uvicorn

    from recalld.interfaces.connections import BoundedServer, bounds, redact_access_log

    embedder = resolve_embedder(settings.embedder, settings)
    app = create_app(settings, embedder=embedder, host=host, extensions=extensions,
                     local_secret=local_secret)  # fmt: skip
    state: ServerState = app.state.recalld
    active = state.active_keys()
    if active == 0 and not is_loopback(host):
        say(
            f"no API keys exist: refusing to listen on {host}; listening on 127.0.0.1 only "
            "(create a key with `recalld keys create --tenant NAME` to serve other hosts)"
        )
        host = "127.0.0.1"
        state.host = host
    store = state.root.status().store
    say(f"recalld {recalld.__version__} HTTP API on http://{_url_host(host)}:{port}"
        f" (OpenAPI at /openapi.json, docs at /docs)")  # fmt: skip
    say(
        f"store: {store.path} ({store.memories} memories of tenant {settings.tenant!r}); "
        f"embedder: {settings.embedder}"
    )
    say(f"auth: {active} active API key(s), every request needs one" if active else
        "auth: no API keys exist, so requests need none: loopback only")  # fmt: skip
    if not active:
        say(KEYLESS_WARNING)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            access_log=access_log, **bounds(say))  # fmt: skip
    heap.settle()  # the model and the store are loaded: out of the collector's full passes
    if access_log:  # uvicorn logs requests at INFO; the rest of its log stays at WARNING
        redact_access_log()
    BoundedServer(config).run()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


__all__ = [
    "ApiError", "BodyLimit", "Caller", "Extension", "ExtensionFactory", "LocalGuard",
    "RateLimiter", "ServerState", "create_app", "is_loopback", "json_depth", "local_refusal",
    "serve",
]  # fmt: skip
