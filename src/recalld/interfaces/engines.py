"""The one engine cache of the servers (HTTP, its MCP tools and inspector, and MCP over
stdio): one engine per tenant grant, all sharing one embedder and the same models."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from recalld.engine import MemoryEngine, open_engine

if TYPE_CHECKING:
    from recalld.config import Settings
    from recalld.providers.embedders import Embedder
    from recalld.retrieval.models import Models

Grant = tuple[str, tuple[str, ...]]
"""A tenant and the shared namespaces it may use: what an engine is opened for."""


class Engines:
    """One engine per tenant grant, opened on first use and kept until :meth:`close`.

    The embedder is loaded once per process, on first use unless one is given (a model that
    cannot load is then the answer to that use, not a crash at start); ``models`` (an LLM
    and / or reranker) are shared by every tenant, or each engine builds the settings' own.
    """

    def __init__(
        self, settings: Settings, embedder: Embedder | None = None, *, models: Models | None = None
    ) -> None:
        self.settings = settings
        self.models = models
        self._embedder = embedder
        self._engines: dict[Grant, MemoryEngine] = {}
        self._lock = threading.Lock()

    def embedder(self) -> Embedder:
        """The shared embedder, loaded on the first call."""
        with self._lock:
            if self._embedder is None:
                from recalld.providers.embedders import resolve_embedder

                self._embedder = resolve_embedder(self.settings.embedder, self.settings)
            return self._embedder

    def get(self, tenant: str | None = None, shared: Sequence[str] | None = None) -> MemoryEngine:
        """The engine of ``tenant`` and its ``shared`` namespaces (default: the settings')."""
        grant = (
            tenant or self.settings.tenant,
            self.settings.shared if shared is None else tuple(shared),
        )
        embedder = self.embedder()
        with self._lock:
            engine = self._engines.get(grant)
            if engine is None:
                update = {"tenant": grant[0], "shared": grant[1]}
                settings = self.settings.model_copy(update=update)
                engine = open_engine(settings=settings, embedder=embedder, models=self.models)
                self._engines[grant] = engine
            return engine

    @property
    def root(self) -> MemoryEngine:
        """The engine of the settings' own tenant: it reads the API keys, and serves callers
        when no key exists."""
        return self.get()

    def close(self) -> None:
        """Close every engine; a later :meth:`get` opens them again."""
        with self._lock:
            for engine in self._engines.values():
                engine.close()
            self._engines.clear()
