"""The library facade: open a store, then add, get, update, forget, list, search, context.

The facade validates input and delegates: persistence to a :class:`~recalld.stores.base.Store`,
vectors to an :class:`~recalld.providers.embedders.Embedder`, ranking to
:mod:`recalld.retrieval.pipeline`.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from recalld.config import Settings, expand_location, load_settings
from recalld.engine_files import FileMethods, whole_store as _whole_store
from recalld.errors import InvalidInputError, StoreError
from recalld.keys import KeyAdmin
from recalld.operations import reading, upkeep, writing
from recalld.operations.reading import FILTER_ARGS, filter_args as _filter_args
from recalld.operations.upkeep import Status as Status
from recalld.operations.writing import Progress, Writer
from recalld.providers.cache import CachedEmbedder, EmbeddingCache
from recalld.providers.embedders import Embedder, resolve_embedder
from recalld.records import (
    AddResult,
    Context,
    Granularity,
    Memory,
    NewMemory,
    SearchMode,
    SearchResult,
)
from recalld.requests import (
    AddMemories,
    ContextQuery,
    ForgetMemories,
    GetFiles,
    GetMemory,
    ImportRequest,
    ListQuery,
    Request,
    SearchQuery,
    SupersedeMemory,
    UpdateMemory,
    parse,
)
from recalld.retrieval.config import RetrievalConfig, get_preset
from recalld.retrieval.models import Models, build_models
from recalld.stores import open_store
from recalld.stores.base import IndexBuild, IndexKind, Store, Tenancy
from recalld.validation import text_of as _text

if TYPE_CHECKING:
    pass


class MemoryEngine(FileMethods):
    """A memory store with its embedder and retrieval settings. Use :func:`recalld.open`."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder | Callable[[], Embedder],
        settings: Settings,
        config: RetrievalConfig | None = None,
        clock: Callable[[], datetime] | None = None,
        models: Models | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.config = config or get_preset(settings.preset)
        self._embedder_factory = (
            embedder if callable(embedder) and not isinstance(embedder, Embedder) else None
        )
        self._embedder: Embedder | None = embedder if isinstance(embedder, Embedder) else None
        self._clock = clock or (lambda: datetime.now(UTC))
        self._cache: EmbeddingCache | None = None
        self._models = models
        self._owns_models = False
        """Whether the models were built here (from settings), so closing is ours to do."""
        self._unfinished = store.unfinished_migration()

    # -- lifecycle -----------------------------------------------------------------------

    def check_whole(self) -> None:
        """Refuse to work on the partial copy an interrupted ``recalld migrate`` left.

        Raises:
            StoreError: naming ``recalld migrate`` as the way to finish the copy.
        """
        if self._unfinished and self.store.unfinished_migration():
            raise StoreError(
                f"tenant {self.store.tenancy.tenant!r} of this store is an unfinished copy: a "
                "`recalld migrate` into it was interrupted before it was verified; run the "
                "same `recalld migrate SOURCE DESTINATION` again to finish it"
            )
        self._unfinished = False

    def __enter__(self) -> MemoryEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()
        if self._cache is not None:
            self._cache.close()
            self._cache = None
        if self._owns_models and self._models is not None:
            self._models.close()
            self._models = None

    @property
    def keys(self) -> KeyAdmin:
        """The HTTP API keys kept in this store, every tenant's (:class:`recalld.keys.KeyAdmin`:
        ``create``, ``list``, ``revoke``, ``active``, ``verify``)."""
        return KeyAdmin(self.store)

    @property
    def models(self) -> Models | None:
        """The optional LLM and reranker the settings name, built on first use; ``None``
        when neither is configured (then no search calls a model)."""
        if self._models is None and (self.settings.llm or self.settings.reranker):
            self._models = build_models(self.settings)
            self._owns_models = True
        return self._models

    @property
    def embedder(self) -> Embedder:
        """The embedder, loaded on first use and checked against the store's fingerprint."""
        if self._embedder is None:
            assert self._embedder_factory is not None
            self._embedder = self._embedder_factory()
        upkeep.check_fingerprint(self.store, self._embedder.fingerprint)
        return self._embedder

    def _with_cache(self, embedder: Embedder) -> Embedder:
        """Document embeddings go through the on-disk cache when one is configured."""
        if self.settings.cache_dir is None or isinstance(embedder, CachedEmbedder):
            return embedder
        if self._cache is None:
            self._cache = EmbeddingCache(Path(self.settings.cache_dir) / "embeddings.sqlite")
        return CachedEmbedder(embedder, self._cache)

    # -- writes --------------------------------------------------------------------------

    def add(self, content: str | bytes, **fields: Any) -> AddResult:
        """Store one memory; ``fields`` are those of :class:`~recalld.records.NewMemory`."""
        unknown = sorted(set(fields) - (set(NewMemory.__dataclass_fields__) - {"content"}))
        if unknown:
            raise InvalidInputError(f"unknown field(s) {', '.join(unknown)}")
        return self.add_many([NewMemory(content=_text(content), **fields)])[0]

    @_whole_store
    def add_many(
        self,
        items: Iterable[NewMemory | str],
        *,
        dedupe: bool = True,
        progress: Progress | None = None,
    ) -> list[AddResult]:
        """Store many memories with batched embedding.

        Everything is validated before anything is written. With ``dedupe``, content
        identical to a live memory in the same scope, project and session is not stored
        again: its result says ``created=False`` and names the existing id.
        """
        return writing.add_many(self._writer(), items, dedupe, progress)

    def _writer(self) -> Writer:
        """What the write path needs of this engine, read now (a swapped clock counts)."""
        return Writer(
            self.store,
            lambda: self.embedder,
            self._with_cache,
            self._clock,
            self.settings.max_content_chars,
        )

    @_whole_store
    def update(self, memory_id: str, **changes: Any) -> Memory:
        """Change fields of a memory; new content is re-embedded. Changes that leave every
        field as it is write nothing (``updated_at`` stays)."""
        return writing.update(self._writer(), memory_id, changes)

    @_whole_store
    def supersede(
        self,
        memory_id: str,
        *,
        by: str | None = None,
        until: datetime | None = None,
        clear: bool = False,
    ) -> Memory:
        """Mark a memory as no longer current: replaced ``by`` a newer memory, or valid
        ``until`` a time (after which it counts as superseded); ``clear`` undoes both.

        Superseded memories rank below current ones (``superseded_factor`` of
        ``RetrievalConfig.promises``), or are left out of search with ``superseded="hide"``;
        ``get`` and ``list`` still return them.

        Raises:
            InvalidInputError: neither ``by``, ``until`` nor ``clear`` given, or ``clear``
                with either.
            ConflictError: ``by`` is the memory itself.
            NotFoundError: either id is unknown (nothing is changed then).
        """
        request = parse(
            SupersedeMemory, {"id": memory_id, "by": by, "until": until, "clear": clear}
        )
        return self.run_supersede(request)

    @_whole_store
    def run_supersede(self, request: SupersedeMemory) -> Memory:
        """Mark the request's memory as no longer current (see :meth:`supersede`)."""
        return writing.supersede(self._writer(), parse(SupersedeMemory, request))

    @_whole_store
    def forget(self, ids: str | Sequence[str], *, hard: bool = False) -> int:
        """Hide memories from search (soft, the default) or delete them (``hard=True``).

        Raises:
            NotFoundError: if any id is unknown (nothing is changed then).
        """
        return writing.forget(self._writer(), ids, hard)

    def run_forget(self, request: ForgetMemories) -> int:
        request = parse(ForgetMemories, request)
        return self.forget(list(request.ids), hard=request.hard)

    def run_add(self, request: AddMemories) -> builtins.list[AddResult]:
        """Store the request's memories (all or none: one refused item stores nothing)."""
        request = parse(AddMemories, request)
        return self.add_many([m.to_new() for m in request.memories], dedupe=request.dedupe)

    def run_update(self, request: UpdateMemory) -> Memory:
        request = parse(UpdateMemory, request)
        return self.update(request.id, **request.changes.changes())

    def execute(self, request: Request) -> Any:
        """Run any request object: the one method an adapter needs.

        Returns what the matching ``run_*`` method returns (:meth:`get` for
        :class:`~recalld.requests.GetMemory`).
        """
        handlers: dict[type[BaseModel], Callable[[Any], Any]] = {
            SearchQuery: self.run_search,
            ContextQuery: self.run_context,
            ListQuery: self.run_list,
            AddMemories: self.run_add,
            UpdateMemory: self.run_update,
            ForgetMemories: self.run_forget,
            ImportRequest: self.run_import,
            GetMemory: lambda r: self.get(r.id),
            SupersedeMemory: self.run_supersede,
            GetFiles: self.run_get_files,
        }
        handler = handlers.get(type(request))
        if handler is None:
            raise InvalidInputError(f"not a request object: {type(request).__name__}")
        return handler(request)

    # -- reads ---------------------------------------------------------------------------

    @_whole_store
    def get(self, memory_id: str) -> Memory:
        return self._writer().get(memory_id)

    def list(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        newest_first: bool = True,
        include_forgotten: bool = False,
        **filters: Any,
    ) -> list[Memory]:
        """Memories passing the filters (see :meth:`search` for their names); keyword form
        of :meth:`run_list`."""
        fields: dict[str, Any] = dict(limit=limit, offset=offset, newest_first=newest_first)
        fields |= dict(include_forgotten=include_forgotten, filters=_filter_args(**filters))
        request = parse(ListQuery, fields)
        return self.run_list(request)

    @_whole_store
    def run_list(self, request: ListQuery) -> builtins.list[Memory]:
        request = parse(ListQuery, request)
        return self.store.list(
            request.filters.to_memory_filter(request.include_forgotten),
            limit=request.limit,
            offset=request.offset,
            newest_first=request.newest_first,
        )

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        mode: SearchMode = "auto",
        project: str | None = None,
        scope: str | None = None,
        types: Sequence[str] = (),
        tags: Sequence[str] = (),
        session_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        as_of: datetime | None = None,
        boost_project: str | None = None,
        preset: str | None = None,
        config: RetrievalConfig | None = None,
        explain: bool = False,
        record_access: bool = False,
        granularity: Granularity = "memory",
    ) -> SearchResult:
        """Ranked memories for a question (keyword form of :meth:`run_search`).

        Args:
            query: the question or keywords.
            limit: how many hits to return (1-1000).
            mode: ``vector`` (semantic only), ``hybrid`` (every channel) or ``auto``.
            project: only memories of this project.
            scope: only memories of this scope (``user``, or a shared namespace).
            types: only memories of these types.
            tags: only memories carrying all of these tags.
            session_id: only memories of this session.
            since: only memories whose reference time is at or after this.
            until: only memories whose reference time is before this.
            as_of: the reference time for relative dates and decay (default: now).
            boost_project: rank this project's memories higher without filtering.
            preset: a named settings bundle (``fast``, ``balanced``, ``thorough``).
            config: explicit retrieval settings (overrides ``preset``).
            explain: attach a :class:`~recalld.records.Trace` to each hit.
            record_access: count this search as an access of the returned memories.
            granularity: ``memory`` (each hit a memory) or ``session`` (one hit per session:
                its best memory, with the session's other matches in ``Hit.related``).
        """
        given = dict(project=project, scope=scope, types=types, tags=tags)
        filters = _filter_args(**given, session_id=session_id, since=since, until=until)
        fields: dict[str, Any] = dict(
            query=query, limit=limit, mode=mode, filters=filters, as_of=as_of
        )
        fields |= dict(boost_project=boost_project, preset=preset, explain=explain)
        fields |= dict(record_access=record_access, granularity=granularity)
        request = parse(SearchQuery, fields)
        return self.run_search(request, config=config)

    @_whole_store
    def run_search(
        self, request: SearchQuery, *, config: RetrievalConfig | None = None
    ) -> SearchResult:
        """Ranked memories for ``request``; ``config`` overrides the request's preset."""
        request = parse(SearchQuery, request)
        chosen = config or (get_preset(request.preset) if request.preset else self.config)
        embedder = self.embedder
        return reading.run_search(self.store, embedder, request, chosen, self._clock, self.models)

    def context(
        self,
        query: str,
        *,
        max_tokens: int | None = None,
        config: RetrievalConfig | None = None,
        **search_args: Any,
    ) -> Context:
        """Prompt-ready text of the best memories that fit ``max_tokens`` (default 2000);
        ``search_args`` are those of :meth:`search` (keyword form of :meth:`run_context`)."""
        filters = _filter_args(
            **{k: search_args.pop(k) for k in list(search_args) if k in FILTER_ARGS}
        )
        request = parse(
            ContextQuery, dict(query=query, max_tokens=max_tokens, filters=filters, **search_args)
        )
        return self.run_context(request, config=config)

    @_whole_store
    def run_context(
        self, request: ContextQuery, *, config: RetrievalConfig | None = None
    ) -> Context:
        """The best memories for ``request`` that fit its token budget, as prompt text."""
        request = parse(ContextQuery, request)

        def run(query: SearchQuery) -> SearchResult:
            return self.run_search(query, config=config)

        return reading.run_context(
            self.store, request, self.config.assembly.max_tokens, run, self._clock
        )

    def status(self) -> Status:
        stats, matches, sources = upkeep.status_figures(self.store, self._embedder)
        return Status(stats, self.settings.embedder, stats.fingerprint, matches, sources)

    def build_index(
        self, kind: IndexKind, *, drop: bool = False, progress: Callable[[str], None] | None = None
    ) -> IndexBuild:
        """Build the tenant's own ``kind`` index (``drop``: remove it): ``vectors``, a vector
        index of its rows; ``words``, word postings for its word channel. Worth it for a
        tenant of tens of thousands of memories (``status`` advises it); store handles
        opened afterwards use it, results stay the same (docs/postgres.md).

        Args:
            kind: ``vectors`` or ``words``.
            drop: remove the index instead of building it.
            progress: told, before a build starts, what is being built.

        Raises:
            InvalidInputError: the store's backend builds no such index on demand (SQLite
                keeps its own up to date), or the engine sees shared namespaces.
        """
        return upkeep.build_index(self.store, kind, drop=drop, progress=progress)

    @_whole_store
    def reindex(self, progress: Progress | None = None) -> int:
        """Re-embed every memory with the configured embedder, then swap in one transaction.

        The old vectors stay in place until the new ones are all computed, so an
        interrupted reindex loses nothing.
        """
        if self._embedder is None:
            assert self._embedder_factory is not None
            self._embedder = self._embedder_factory()
        cached = self._with_cache(self._embedder)
        return upkeep.reindex(self.store, self._embedder, cached, progress)

    def _check_new(self, item: NewMemory) -> None:
        """Raise InvalidInputError if ``item`` could not be stored."""
        self._writer().check_new(item)


def open_engine(
    db: str | os.PathLike[str] | None = None,
    *,
    embedder: Embedder | str | None = None,
    settings: Settings | None = None,
    config: RetrievalConfig | None = None,
    models: Models | None = None,
    create: bool = True,
    **overrides: Any,
) -> MemoryEngine:
    """Open (creating if needed, unless ``create=False``) a memory store.

    Args:
        db: the store: an SQLite file, or a PostgreSQL DSN (``postgresql://...``, needs the
            ``postgres`` extra); default from settings (``RECALLD_DB``, config file, user
            data dir).
        embedder: an :class:`Embedder`, or a spec such as ``local`` or ``onnx:/folder``.
        settings: fully resolved settings; otherwise they are loaded with ``overrides``.
        config: retrieval settings; default the preset named in settings.
        models: an LLM and / or reranker to use instead of those the settings name.
        create: make a new SQLite store when none exists at ``db``; False raises
            :class:`StoreError` naming the path instead.
        **overrides: other settings (as in :class:`Settings`), used when ``settings`` is None;
            ``tenant="alice", shared=["team"]`` opens the store for a tenant.
    """
    if settings is None:
        spec = embedder if isinstance(embedder, str) else None
        settings = load_settings({**overrides, "db": db, "embedder": spec})
    elif db is not None:
        settings = settings.model_copy(update={"db": expand_location(db)})
    store = open_store(settings.db, Tenancy(settings.tenant, settings.shared), create=create)
    resolved = settings
    if isinstance(embedder, Embedder):
        return MemoryEngine(store, embedder, resolved, config, models=models)
    return MemoryEngine(
        store,
        lambda: resolve_embedder(resolved.embedder, resolved),
        resolved,
        config,
        models=models,
    )
