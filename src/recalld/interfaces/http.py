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
:meth:`ServerState.caller`) and may bring a lifespan.

The parts, each in its module: the routes (:mod:`.http_routes`), the error shape
(:mod:`.http_errors`), the middlewares (:mod:`.http_guards`), the OpenAPI document
(:mod:`.http_openapi`), authentication (:mod:`.auth`) and the engine cache
(:mod:`.engines`), shared with the MCP tools through :mod:`.server_state`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

import recalld
from recalld import heap
from recalld.config import Settings
from recalld.engine import MemoryEngine
from recalld.interfaces.auth import FAILED_AUTH_PER_MINUTE, Caller, RateLimiter
from recalld.interfaces.exposure import KEYLESS_WARNING
from recalld.interfaces.http_errors import ApiError, error_response, install_error_handlers
from recalld.interfaces.http_guards import (
    BodyLimit,
    LocalGuard,
    is_loopback,
    json_depth,
    local_refusal,
)
from recalld.interfaces.http_openapi import openapi_document
from recalld.interfaces.http_routes import install_routes
from recalld.interfaces.inspector import install_inspector
from recalld.interfaces.server_state import Extension, ExtensionFactory, ServerState
from recalld.providers.embedders import Embedder, resolve_embedder
from recalld.request_limits import MAX_RESPONSE_BYTES
from recalld.retrieval.models import Models


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
    state = ServerState(
        settings,
        embedder or resolve_embedder(settings.embedder, settings),
        models=models,
        host=host,
    )
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
                await run_in_threadpool(doors.close)
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
    app.add_middleware(
        BodyLimit, limit=settings.http_max_body_bytes, depth=settings.http_max_json_depth
    )
    app.add_middleware(LocalGuard, state=state)  # outermost: before anything reads the body
    if local_secret is not None:
        from recalld.interfaces.local_proof import LocalProof

        app.add_middleware(LocalProof, secret=local_secret)
    install_error_handlers(app)
    doors = install_routes(app, state, lambda: MAX_RESPONSE_BYTES)  # read at each answer
    install_inspector(app)
    for extension in mounted:
        app.mount(extension.path, extension.app)

    def openapi() -> dict[str, Any]:
        return openapi_document(app, settings)

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/docs", include_in_schema=False)
    async def docs() -> Any:
        from recalld.interfaces.api_docs import POLICY, render

        return HTMLResponse(render(app.openapi()), headers={"Content-Security-Policy": POLICY})

    return app


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
    app = create_app(
        settings, embedder=embedder, host=host, extensions=extensions, local_secret=local_secret
    )
    state: ServerState = app.state.recalld
    active = state.active_keys()
    host = state.host = listen_host(host, active, say)
    announce(settings, host, port, active, state.root, say)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", access_log=access_log, **bounds(say)
    )
    heap.settle()  # the model and the store are loaded: out of the collector's full passes
    if access_log:  # uvicorn logs requests at INFO; the rest of its log stays at WARNING
        redact_access_log()
    BoundedServer(config).run()


def listen_host(host: str, active_keys: int, say: Callable[[str], None]) -> str:
    """The address to listen on: ``host``, or 127.0.0.1 (said) when no API key exists and
    ``host`` is not a loopback address."""
    if active_keys == 0 and not is_loopback(host):
        say(
            f"no API keys exist: refusing to listen on {host}; listening on 127.0.0.1 only "
            "(create a key with `recalld keys create --tenant NAME` to serve other hosts)"
        )
        return "127.0.0.1"
    return host


def announce(
    settings: Settings,
    host: str,
    port: int,
    active_keys: int,
    root: MemoryEngine,
    say: Callable[[str], None],
) -> None:
    """Say what the server serves and where: the address, the store (read through ``root``,
    the engine of the settings' tenant), the keys."""
    store = root.status().store
    say(
        f"recalld {recalld.__version__} HTTP API on http://{_url_host(host)}:{port}"
        f" (OpenAPI at /openapi.json, docs at /docs)"
    )
    say(
        f"store: {store.path} ({store.memories} memories of tenant {settings.tenant!r}); "
        f"embedder: {settings.embedder}"
    )
    say(
        f"auth: {active_keys} active API key(s), every request needs one"
        if active_keys
        else "auth: no API keys exist, so requests need none: loopback only"
    )
    if not active_keys:
        say(KEYLESS_WARNING)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


__all__ = [
    "FAILED_AUTH_PER_MINUTE",
    "MAX_RESPONSE_BYTES",
    "ApiError",
    "BodyLimit",
    "Caller",
    "Extension",
    "ExtensionFactory",
    "LocalGuard",
    "RateLimiter",
    "ServerState",
    "create_app",
    "error_response",
    "announce",
    "is_loopback",
    "json_depth",
    "listen_host",
    "local_refusal",
    "serve",
]
