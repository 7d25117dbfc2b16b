"""What the HTTP server shares across requests and with what it mounts (the MCP tools):
the engine cache, the one authentication path, and where it listens."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Scope

from recalld.config import Settings
from recalld.engine import MemoryEngine
from recalld.interfaces.auth import Auth, Caller
from recalld.interfaces.engines import Engines
from recalld.providers.embedders import Embedder
from recalld.retrieval.models import Models


class ServerState:
    """One embedder, one engine per tenant grant (:class:`Engines`), one :class:`Auth`."""

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
        self.engines = Engines(settings, embedder, models=models)
        self.auth = Auth(self.engines, settings.http_rate_limit)
        self.engine_for(settings.tenant, settings.shared)  # opens the store: fail early

    @property
    def root(self) -> MemoryEngine:
        """The engine of the settings' own tenant: it reads the keys, and serves callers
        when no key exists."""
        return self.engines.root

    def engine_for(self, tenant: str, shared: Sequence[str] = ()) -> MemoryEngine:
        """The engine of a tenant grant, opened on first use and kept."""
        return self.engines.get(tenant, tuple(shared))

    def active_keys(self) -> int:
        return self.auth.active_keys()

    def authenticate(self, authorization: str | None, client: str = "") -> Caller:
        """The caller of a request with this ``Authorization`` header, from ``client`` (see
        :meth:`Auth.authenticate`)."""
        return self.auth.authenticate(authorization, client, self.host)

    async def caller(self, scope: Scope) -> Caller:
        """The caller of an HTTP request (its ASGI scope): the path every door takes.

        Raises:
            ApiError: 401 or 429, as :meth:`authenticate`.
        """
        header = Headers(scope=scope).get("authorization")
        client = scope.get("client")
        return await run_in_threadpool(self.authenticate, header, client[0] if client else "")

    def close(self) -> None:
        """Close every engine (the app's shutdown); a later request opens them again."""
        self.engines.close()


@dataclass(frozen=True)
class Extension:
    """Another ASGI app served under ``path`` (e.g. the MCP server under ``/mcp``)."""

    path: str
    app: ASGIApp
    lifespan: Callable[[], AbstractAsyncContextManager[Any]] | None = None


ExtensionFactory = Callable[[ServerState], Extension]
