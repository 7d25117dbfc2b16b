"""The library facade: open a store, then add, get, update, forget, list, search, context.

The facade validates input and delegates: persistence to a :class:`~recalld.stores.base.Store`,
vectors to an :class:`~recalld.providers.embedders.Embedder`, ranking to
:mod:`recalld.retrieval.pipeline`.
"""

from __future__ import annotations

import builtins
import functools
import io
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

from pydantic import BaseModel

from recalld.config import Settings, expand_location, load_settings
from recalld.errors import (
    ConflictError,
    EmbedderMismatchError,
    InvalidInputError,
    NotFoundError,
    StoreError,
)
from recalld.keys import KeyAdmin
from recalld.providers.cache import CachedEmbedder, EmbeddingCache
from recalld.providers.embedders import Embedder, Fingerprint, Vectors, resolve_embedder
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
    MAX_LIMIT,
    AddMemories,
    ContextQuery,
    ForgetMemories,
    GetMemory,
    ImportRequest,
    ListQuery,
    Request,
    SearchQuery,
    SupersedeMemory,
    UpdateMemory,
    as_utc,
    parse,
    refuse_unstorable,
)
from recalld.retrieval.assemble import fit_budget
from recalld.retrieval.config import RetrievalConfig, get_preset
from recalld.retrieval.context_block import context_line, successors_in_context
from recalld.retrieval.models import Models, build_models
from recalld.retrieval.pipeline import SearchRequest, search
from recalld.stores import open_store
from recalld.stores.base import (
    SourceIndex,
    Store,
    StoreStats,
    Tenancy,
    already_stored,
)
from recalld.text import estimate_tokens
from recalld.validation import prepare_memory, text_of as _text

if TYPE_CHECKING:
    import threading

    from recalld.sources.importer import ImportReport
    from recalld.sources.indexer import IndexDeps, IndexProgress, IndexReport
    from recalld.sources.status import SourceStatus

Progress = Callable[[int], None]
EMBED_SPAN = 2048
"""Memories embedded together in bulk adds and reindex: the embedder sorts them by length
and cuts batches from the sorted list, so the longer the span, the less padding (spans of
256 ran about 15% slower than one span of 1,500 LoCoMo turns). Each span is then committed
in transactions of ``WRITE_BATCH``; 2,048 vectors hold 3 MB."""
WRITE_BATCH = 256
"""Memories committed per transaction in bulk adds."""
CONTEXT_MIN_HITS = 50
"""``context()`` considers at least this many hits, and one more per
``CONTEXT_TOKENS_PER_HIT`` tokens of budget, so that a budget is filled even when memories
are short (a chat turn is 20-40 tokens): 2000 tokens draw on 125 hits."""
CONTEXT_TOKENS_PER_HIT = 16


@dataclass(frozen=True)
class Status:
    """What ``recalld status`` reports."""

    store: StoreStats
    embedder: str
    embedder_fingerprint: str | None
    fingerprint_matches: bool | None
    """None when the embedder has not been loaded (nothing embedded yet in this process)."""
    sources: SourceStatus | None = None
    """Indexed workspaces compared with the disk; None when none was ever indexed."""


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _whole_store(method: _Method) -> _Method:
    """Run ``method`` only on a store that is not a partial copy (see
    :meth:`MemoryEngine.check_whole`)."""

    @functools.wraps(method)
    def call(self: MemoryEngine, *args: Any, **kwargs: Any) -> Any:
        self.check_whole()
        return method(self, *args, **kwargs)

    return cast(_Method, call)


class MemoryEngine:
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
        self._embedder_factory = embedder if callable(embedder) and not isinstance(
            embedder, Embedder) else None  # fmt: skip
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
        self._check_fingerprint(self._embedder.fingerprint)
        return self._embedder

    def _check_fingerprint(self, fingerprint: Fingerprint) -> None:
        stored = self.store.get_fingerprint()
        if stored == fingerprint.to_json():
            return
        if stored is None or not self.store.any_vectors():
            # No vector exists that the new embedder's could be mixed with: adopt it.
            self.store.set_fingerprint(fingerprint.to_json())
            return
        theirs = Fingerprint.from_json(stored).describe()
        raise EmbedderMismatchError(
            f"this store's vectors were made by {theirs}, but the configured embedder is "
            f"{fingerprint.describe()}; run `recalld reindex` to re-embed every memory "
            "with the configured embedder (nothing is lost), or configure the old one"
        )

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
        now = self._clock()
        given = [NewMemory(i) if isinstance(i, str) else i for i in items]
        memories = []
        for number, item in enumerate(given, start=1):
            try:
                memories.append(self._prepare(item, now))
            except InvalidInputError as exc:
                if len(given) == 1:
                    raise
                raise InvalidInputError(f"item {number} of {len(given)}: {exc}") from exc
        results: list[AddResult] = []
        for start in range(0, len(memories), EMBED_SPAN):
            results.extend(self._add_span(memories[start : start + EMBED_SPAN], dedupe, progress))
        return results

    def _add_span(
        self, span: list[Memory], dedupe: bool, progress: Progress | None
    ) -> list[AddResult]:
        """Classify ``span`` (same id, duplicate or fresh), embed the fresh memories in one
        call, then commit them ``WRITE_BATCH`` at a time. ``progress`` advances as memories
        are found already stored and as the model finishes each batch."""
        known = already_stored(span, self.store.get_many, self.store.find_duplicates, dedupe)
        fresh = [m for m, match in zip(span, known, strict=True) if match is None]
        if progress is not None and len(fresh) < len(span):
            progress(len(span) - len(fresh))
        late: dict[str, str] = {}
        windows: dict[str, int] = {}
        if fresh:
            embedder = self.embedder
            texts = [m.embedding_text for m in fresh]
            embedded = self._with_cache(embedder).embed_documents(texts, progress)
            fp = embedder.fingerprint.to_json()
            stamped = [replace(m, embedding_fingerprint=fp) for m in fresh]
            # Checked again inside each write's lock: another handle or process may have
            # stored the same memory while this one was embedding.
            for start in range(0, len(stamped), WRITE_BATCH):
                late |= self.store.insert_unique(stamped[start : start + WRITE_BATCH],
                                                 embedded.vectors[start : start + WRITE_BATCH],
                                                 by_content=dedupe)  # fmt: skip
            windows = dict(zip((m.id for m in fresh), embedded.windows, strict=True))
        return [AddResult(m.id, False, match) if match is not None
                else AddResult(m.id, False, late[m.id]) if m.id in late
                else AddResult(m.id, True, embedding_windows=windows[m.id])
                for m, match in zip(span, known, strict=True)]  # fmt: skip

    def _prepare(self, item: NewMemory, now: datetime) -> Memory:
        """``item`` checked and made a :class:`Memory` (see :func:`prepare_memory`)."""
        return prepare_memory(item, now, max_content_chars=self.settings.max_content_chars,
                              namespace_for=self.store.tenancy.namespace_for)  # fmt: skip

    @_whole_store
    def update(self, memory_id: str, **changes: Any) -> Memory:
        """Change fields of a memory; new content is re-embedded. Changes that leave every
        field as it is write nothing (``updated_at`` stays)."""
        old = self.get(memory_id)
        allowed = set(NewMemory.__dataclass_fields__) - {"id"}
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise InvalidInputError(f"cannot update {', '.join(unknown)}")
        if "content" in changes:
            changes["content"] = _text(changes["content"])
        merged = NewMemory(**{**{f: getattr(old, f) for f in allowed}, "id": old.id, **changes})
        if "content" in changes and "entities" not in changes:
            merged = replace(merged, entities=None)
        fresh = self._prepare(merged, self._clock())
        # Fields NewMemory does not carry are kept: an update must not un-forget a memory.
        fresh = replace(fresh, created_at=old.created_at, access_count=old.access_count,
                        last_accessed_at=old.last_accessed_at, forgotten_at=old.forgotten_at,
                        valid_until=old.valid_until, superseded_by=old.superseded_by,
                        position=old.position if fresh.session_id == old.session_id
                        else None)  # fmt: skip
        if replace(fresh, updated_at=old.updated_at,
                   embedding_fingerprint=old.embedding_fingerprint) == old:  # fmt: skip
            return old
        vector = None
        if fresh.embedding_text != old.embedding_text:
            embedded = self._with_cache(self.embedder).embed_documents([fresh.embedding_text])
            vector = embedded.vectors[0]
            fresh = replace(fresh, embedding_fingerprint=self.embedder.fingerprint.to_json())
        else:
            fresh = replace(fresh, embedding_fingerprint=old.embedding_fingerprint)
        self.store.replace(fresh, vector)
        return self.get(memory_id)

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

        Superseded memories rank below current ones (``RetrievalConfig.superseded_factor``),
        or are left out of search with ``superseded="hide"``; ``get`` and ``list`` still
        return them.

        Raises:
            InvalidInputError: neither ``by``, ``until`` nor ``clear`` given, or ``clear``
                with either.
            ConflictError: ``by`` is the memory itself.
            NotFoundError: either id is unknown (nothing is changed then).
        """
        request = parse(SupersedeMemory, {"id": memory_id, "by": by, "until": until,
                                          "clear": clear})  # fmt: skip
        return self.run_supersede(request)

    def run_supersede(self, request: SupersedeMemory) -> Memory:
        """Mark the request's memory as no longer current (see :meth:`supersede`)."""
        request = parse(SupersedeMemory, request)
        old = self.get(request.id)
        if request.by == request.id:
            raise ConflictError("a memory cannot supersede itself")
        if request.by is not None:
            self.get(request.by)
        fresh = replace(
            old,
            superseded_by=None if request.clear else (request.by or old.superseded_by),
            valid_until=None if request.clear else (as_utc(request.until) or old.valid_until),
            updated_at=self._clock(),
        )
        self.store.replace(fresh, None)
        return self.get(request.id)

    @_whole_store
    def forget(self, ids: str | Sequence[str], *, hard: bool = False) -> int:
        """Hide memories from search (soft, the default) or delete them (``hard=True``).

        Raises:
            NotFoundError: if any id is unknown (nothing is changed then).
        """
        wanted = [ids] if isinstance(ids, str) else list(ids)
        refuse_unstorable(wanted, "id")
        found = {m.id for m in self.store.get_many(wanted)}
        missing = [i for i in wanted if i not in found]
        if missing:
            raise NotFoundError(f"unknown id: no memory with id {', '.join(missing)}")
        return self.store.forget(wanted, hard=hard, at=self._clock())

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
            SearchQuery: self.run_search, ContextQuery: self.run_context,
            ListQuery: self.run_list, AddMemories: self.run_add, UpdateMemory: self.run_update,
            ForgetMemories: self.run_forget, ImportRequest: self.run_import,
            GetMemory: lambda r: self.get(r.id), SupersedeMemory: self.run_supersede,
        }  # fmt: skip
        handler = handlers.get(type(request))
        if handler is None:
            raise InvalidInputError(f"not a request object: {type(request).__name__}")
        return handler(request)

    # -- reads ---------------------------------------------------------------------------

    @_whole_store
    def get(self, memory_id: str) -> Memory:
        refuse_unstorable(memory_id, "id")
        found = self.store.get_many([memory_id])
        if not found:
            raise NotFoundError(f"unknown id: no memory with id {memory_id}")
        return found[0]

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
        request = parse(ListQuery, dict(
            limit=limit, offset=offset, newest_first=newest_first,
            include_forgotten=include_forgotten, filters=_filter_args(**filters),
        ))  # fmt: skip
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
        filters = _filter_args(project=project, scope=scope, types=types, tags=tags,
                               session_id=session_id, since=since, until=until)  # fmt: skip
        request = parse(SearchQuery, dict(
            query=query, limit=limit, mode=mode, filters=filters, as_of=as_of,
            boost_project=boost_project, preset=preset, explain=explain,
            record_access=record_access, granularity=granularity,
        ))  # fmt: skip
        return self.run_search(request, config=config)

    @_whole_store
    def run_search(
        self, request: SearchQuery, *, config: RetrievalConfig | None = None
    ) -> SearchResult:
        """Ranked memories for ``request``; ``config`` overrides the request's preset."""
        request = parse(SearchQuery, request)
        pipeline_request = SearchRequest(
            query=request.query,
            limit=request.limit,
            mode=request.mode,
            filters=request.filters.to_memory_filter(),
            as_of=as_utc(request.as_of),
            project=request.boost_project or request.filters.project,
            explain=request.explain,
            granularity=request.granularity,
            near_misses=request.near_misses,
        )
        chosen = config or (get_preset(request.preset) if request.preset else self.config)
        result = search(self.store, self.embedder, pipeline_request, chosen, self._clock(),
                        self.models)  # fmt: skip
        if request.record_access and result.hits:
            self.store.record_access([h.memory.id for h in result.hits], self._clock())
        return result

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
        filters = _filter_args(**{k: search_args.pop(k) for k in list(search_args)
                                  if k in FILTER_ARGS})  # fmt: skip
        request = parse(ContextQuery, dict(query=query, max_tokens=max_tokens, filters=filters,
                                           **search_args))  # fmt: skip
        return self.run_context(request, config=config)

    @_whole_store
    def run_context(
        self, request: ContextQuery, *, config: RetrievalConfig | None = None
    ) -> Context:
        """The best memories for ``request`` that fit its token budget, as prompt text."""
        request = parse(ContextQuery, request)
        budget = self.config.max_tokens if request.max_tokens is None else request.max_tokens
        if budget < 1:
            raise InvalidInputError("max_tokens must be positive")
        limit = request.limit or min(
            MAX_LIMIT, max(CONTEXT_MIN_HITS, budget // CONTEXT_TOKENS_PER_HIT)
        )
        fields = request.model_dump(exclude={"max_tokens", "limit"})
        query = SearchQuery.model_validate({**fields, "filters": request.filters,
                                            "limit": limit})  # fmt: skip
        result = self.run_search(query, config=config)
        # A replaced fact is marked with what replaced it (see recalld.retrieval.context_block).
        reference = as_utc(query.as_of) or self._clock()
        successors = successors_in_context([h.memory for h in result.hits], self._lookup,
                                           query.filters.to_memory_filter(), reference)  # fmt: skip
        line = {h.memory.id: context_line(h.memory, successors.get(h.memory.id), reference)
                for h in result.hits}  # fmt: skip
        chosen = fit_budget(result.hits, lambda h: estimate_tokens(line[h.memory.id]), budget)
        lines = [line[h.memory.id] for h in chosen]
        text = "\n".join(["[Memory Context]", *lines]) if lines else ""
        return Context(text, tuple(chosen), sum(estimate_tokens(x) for x in lines), budget)

    def _lookup(self, ids: builtins.list[str]) -> dict[str, Memory]:
        """The memories of ``ids`` this store's tenant sees, by id."""
        return {m.id: m for m in self.store.get_many(ids)}

    def status(self) -> Status:
        stats = self.store.stats()
        matches = None
        if self._embedder is not None and stats.fingerprint is not None:
            matches = stats.fingerprint == self._embedder.fingerprint.to_json()
        from recalld.sources.status import source_status

        sources = source_status(self.store) if isinstance(self.store, SourceIndex) else None
        return Status(stats, self.settings.embedder, stats.fingerprint, matches, sources)

    @_whole_store
    def reindex(self, progress: Progress | None = None) -> int:
        """Re-embed every memory with the configured embedder, then swap in one transaction.

        The old vectors stay in place until the new ones are all computed, so an
        interrupted reindex loses nothing.
        """
        if self._embedder is None:
            assert self._embedder_factory is not None
            self._embedder = self._embedder_factory()
        embedder = self._with_cache(self._embedder)
        vectors: dict[str, Vectors] = {}
        for batch in self.store.iter_contents(EMBED_SPAN):
            embedded = embedder.embed_documents([content for _, content in batch], progress)
            vectors.update(zip((i for i, _ in batch), embedded.vectors, strict=True))
        self.store.swap_vectors(vectors, self._embedder.fingerprint.to_json())
        return len(vectors)

    # -- sources -------------------------------------------------------------------------

    @_whole_store
    def index(
        self,
        paths: Sequence[str | os.PathLike[str]] = (),
        *,
        globs: Sequence[str] | None = None,
        force: bool = False,
        max_file_bytes: int | None = None,
        allow_empty: bool = False,
        follow_symlinks: bool = False,
        progress: IndexProgress | None = None,
    ) -> IndexReport:
        """Index markdown memory files incrementally; see :mod:`recalld.sources.indexer`.

        Args:
            paths: folders (a memory workspace) or files; none re-indexes every known root.
            globs: files to pick under each folder (default ``MEMORY.md``, ``memory/**/*.md``).
            force: re-chunk and re-embed every file, changed or not.
            max_file_bytes: larger files are skipped and reported (default 5 MB).
            allow_empty: accept folders that match no file yet.
            follow_symlinks: follow symbolic links that resolve outside the workspace (by
                default they are skipped and reported in ``problems``).
            progress: called with (chunks done, chunks to embed), from before the first.

        Raises:
            InvalidInputError: a path does not exist, a glob is invalid, or nothing matched.
            EmbedderMismatchError: the store's vectors come from another embedder.
        """
        from recalld.sources.indexer import IndexOptions, index_sources
        from recalld.sources.reading import MAX_FILE_BYTES

        options = IndexOptions(
            globs=None if globs is None else tuple(globs), force=force,
            max_file_bytes=max_file_bytes or MAX_FILE_BYTES, allow_empty=allow_empty,
            follow_symlinks=follow_symlinks,
        )  # fmt: skip
        return index_sources([os.fspath(p) for p in paths], options, self._index_deps(), progress)

    def _source_index(self) -> SourceIndex:
        if not isinstance(self.store, SourceIndex):
            raise StoreError("this store's backend does not index files (yet)")
        return self.store

    def _index_deps(self) -> IndexDeps:
        from recalld.sources.indexer import IndexDeps

        def embed(texts: Sequence[str]) -> Vectors:
            return self._with_cache(self.embedder).embed_documents(texts).vectors

        return IndexDeps(
            store=self._source_index(), embed=embed,
            fingerprint=lambda: self.embedder.fingerprint.to_json(),
            prepare=lambda item: self._prepare(item, self._clock()), clock=self._clock,
        )  # fmt: skip

    @_whole_store
    def watch(
        self,
        paths: Sequence[str | os.PathLike[str]] = (),
        *,
        globs: Sequence[str] | None = None,
        interval: float | None = None,
        debounce: float | None = None,
        max_seconds: float | None = None,
        on_report: Callable[[IndexReport], None] | None = None,
        stop: threading.Event | None = None,
    ) -> int:
        """Index ``paths``, then re-index each settled change; returns the number of runs.

        Runs until ``stop`` is set, ``max_seconds`` pass, or KeyboardInterrupt (which
        propagates; every finished file stays indexed). Arguments are as for :meth:`index`.
        """
        from recalld.sources import watch as watching
        from recalld.sources.indexer import resolve_roots

        names = [os.fspath(p) for p in paths]
        pattern = None if globs is None else tuple(globs)
        roots = resolve_roots(names, pattern, self._source_index())
        options = watching.WatchOptions(
            interval=interval or watching.POLL_SECONDS,
            debounce=watching.DEBOUNCE_SECONDS if debounce is None else debounce,
            max_seconds=max_seconds,
        )
        return watching.watch(
            lambda: self.index(names, globs=pattern, allow_empty=True),
            lambda: watching.snapshot(roots), on_report or (lambda report: None), options, stop,
        )  # fmt: skip

    @_whole_store
    def run_import(
        self, request: ImportRequest, *, progress: Callable[[int, int], None] | None = None
    ) -> ImportReport:
        """Import a file in any format (:data:`~recalld.requests.IMPORT_FORMATS`).

        Every format has one policy for bad lines (:func:`~recalld.sources.importer.
        check_problems`): each is reported in ``problems`` with its number and why, and
        skipped; with ``strict`` any bad line refuses the whole input, storing nothing.
        ``memories`` (JSONL, one memory object a line) are stored with deduplication
        (``turns`` counts the memories read, ``already_present`` the duplicates).
        Transcripts: see :meth:`import_transcript`. ``progress`` is called with (done,
        total).
        """
        from recalld.sources.importer import ImportReport, check_problems

        request = parse(ImportRequest, request)
        source: str | BinaryIO = (request.path if request.path is not None
                                  else io.BytesIO(request.content or b""))  # fmt: skip
        if request.format != "memories":
            return self.import_transcript(source, request.format, progress=progress,
                                          strict=request.strict)  # fmt: skip
        from recalld.io import read_numbered_memories
        from recalld.sources.importer import read_source

        data, _, _ = read_source(source)
        numbered, problems = read_numbered_memories(data.splitlines(keepends=True))
        items: builtins.list[NewMemory] = []
        for number, item in numbered:
            try:
                self._check_new(item)
            except InvalidInputError as exc:
                problems.append(f"line {number}: {exc}")
                continue
            items.append(item)
        problems.sort(key=_line_number)
        check_problems(problems, len(items), "memories", request.strict)
        results = self.add_many(items, progress=_counting(progress, len(items)))
        created = sum(r.created for r in results)
        return ImportReport("memories", len(items), created, len(results) - created, 0, 0,
                            tuple(problems))  # fmt: skip

    def import_transcript(
        self, source: str | os.PathLike[str] | BinaryIO, fmt: str, *,
        progress: Callable[[int, int], None] | None = None, strict: bool = False,
    ) -> ImportReport:  # fmt: skip
        """Import a conversation transcript turn by turn; re-importing adds nothing.

        Args:
            source: a file (``.gz`` is decompressed) or a binary stream.
            fmt: ``jsonl-transcript``, ``claude-code``, ``longmemeval`` or ``locomo``
                (see :mod:`recalld.sources.transcripts` and :mod:`recalld.sources.datasets`).
            progress: called with (turns embedded or found stored, turns to store) as the
                work advances.
            strict: refuse the whole transcript when any line is bad (default: skip them).
        """
        from recalld.sources.importer import ImportDeps, import_transcript

        def add_turns(items: Sequence[NewMemory]) -> list[AddResult]:
            # Turns are not deduplicated: the same words said twice are two turns.
            return self.add_many(items, dedupe=False, progress=_counting(progress, len(items)))

        deps = ImportDeps(validate=self._check_new, add_many=add_turns)
        return import_transcript(source, fmt, deps, strict=strict)

    def _check_new(self, item: NewMemory) -> None:
        """Raise InvalidInputError if ``item`` could not be stored."""
        self._prepare(item, self._clock())


def _line_number(problem: str) -> int:
    """Problems in file order: "line 12: ..." sorts by 12 (others first)."""
    head = problem.split(":", 1)[0]
    return int(head[5:]) if head.startswith("line ") and head[5:].isdigit() else 0


def _counting(progress: Callable[[int, int], None] | None, total: int) -> Callable[[int], None]:
    """A step callback that reports (done so far, ``total``) to ``progress``."""
    done = 0

    def advance(step: int) -> None:
        nonlocal done
        done += step
        if progress is not None:
            progress(done, total)

    return advance


FILTER_ARGS = ("project", "scope", "types", "tags", "session_id", "superseded_by", "since", "until")
"""The keyword arguments of :meth:`MemoryEngine.search` that are :class:`Filters`."""


def _filter_args(**given: Any) -> dict[str, Any]:
    """The filter keywords given, as :class:`~recalld.requests.Filters` input."""
    unknown = sorted(set(given) - set(FILTER_ARGS))
    if unknown:
        raise InvalidInputError(f"unknown filter(s) {', '.join(unknown)}")
    return {k: v for k, v in given.items() if v is not None and v != () and v != []}


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
