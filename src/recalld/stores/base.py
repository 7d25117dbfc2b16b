"""The store protocol every backend implements, and the typed records it trades in.

Candidate generation for every channel is a store capability (:meth:`Store.candidates`),
so a backend can answer all channels at once (one SQL round trip on PostgreSQL).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from recalld.errors import ConflictError, InvalidInputError
from recalld.records import (
    ApiKey,
    IndexBuild as IndexBuild,
    IndexKind as IndexKind,
    Memory,
    MemoryFilter,
)

# The asks and evidence of the store protocol, importable from here as before.
from recalld.stores.asks import (
    Ask as Ask,
    CandidateRequest as CandidateRequest,
    ChannelCandidate as ChannelCandidate,
    EntitiesAsk as EntitiesAsk,
    NearestAsk as NearestAsk,
    RecentAsk as RecentAsk,
    TextAsk as TextAsk,
    WordsAsk as WordsAsk,
    ranked as ranked,
)

Vector = npt.NDArray[np.float32]

DEFAULT_TENANT = "default"
"""The tenant a store is opened for when none is named: today's single-user store."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")


@dataclass(frozen=True)
class Tenancy:
    """Whose memories a store handle reaches: the tenant's own namespace plus the shared
    namespaces it is granted. Every store query is confined to :attr:`visible`.

    Grants are given by whoever opens the store (a server's authentication layer, or the
    user's own settings); a namespace is just a name, so granting another tenant's name
    shares that tenant's memories on purpose.
    """

    tenant: str = DEFAULT_TENANT
    shared: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (self.tenant, *self.shared):
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise InvalidInputError(
                    f"invalid tenant or namespace name {name!r}: use 1-128 letters, digits"
                    " and _ . : @ - (starting with a letter or digit)"
                )

    @property
    def visible(self) -> tuple[str, ...]:
        """The namespaces this handle reads and writes, its own first."""
        return tuple(dict.fromkeys((self.tenant, *self.shared)))

    def namespace_for(self, requested: str | None) -> str:
        """The namespace a new memory goes to: the tenant's own unless a granted one is named.

        Raises:
            InvalidInputError: the namespace is not the tenant's own nor granted to it.
        """
        if requested is None or requested == self.tenant:
            return self.tenant
        if requested not in self.shared:
            raise InvalidInputError(
                f"namespace {requested!r} is not granted to tenant {self.tenant!r}"
            )
        return requested


DedupKey = tuple[str, str, str | None, str | None, str]
"""(content_hash, scope, project, session_id, namespace): equal keys are duplicates."""


def dedup_key(memory: Memory) -> DedupKey:
    """What makes two memories the same for ``dedupe``: content, scope, project, session
    and namespace."""
    return (
        memory.content_hash,
        memory.scope,
        memory.project,
        memory.session_id,
        memory.namespace or "",
    )


def id_taken(memory_id: str) -> ConflictError:
    return ConflictError(
        f"a memory with id {memory_id} already exists with other content; use update() to change it"
    )


def already_stored(
    memories: Sequence[Memory],
    get_many: Callable[[Sequence[str]], list[Memory]],
    find_duplicates: Callable[[Sequence[DedupKey]], dict[DedupKey, str]],
    by_content: bool = True,
) -> list[str | None]:
    """For each of ``memories``, in order, the id of the memory the store already holds for
    it, or None for a new one: the same id with the same content, or (``by_content``) a
    live memory of the same :func:`dedup_key`, or an earlier one of ``memories``. Read by
    ``add_many`` before it embeds, and again by ``insert_unique`` inside the write's lock.

    Raises:
        ConflictError: an id is stored with other content.
    """
    stored = {m.id: m for m in get_many([m.id for m in memories])}
    keys = [dedup_key(m) for m in memories]
    live = find_duplicates(keys) if by_content else {}
    found: list[str | None] = []
    seen: dict[DedupKey, str] = {}
    for memory, key in zip(memories, keys, strict=True):
        old = stored.get(memory.id)
        if old is not None:
            if old.content_hash != memory.content_hash:
                raise id_taken(memory.id)
            found.append(old.id)
        elif by_content and (key in live or key in seen):
            found.append(live.get(key) or seen[key])
        else:
            seen[key] = memory.id
            found.append(None)
    return found


@dataclass(frozen=True)
class SearchRows:
    """What one search reads, in one store call (:meth:`Store.search_rows`).

    ``channels[i]`` answers ``requests[i]`` as :meth:`Store.candidates` would; ``memories``
    holds the rows the backend read with them (a remote backend: every candidate's and every
    neighbour's in ``neighbors``, to save round trips; a backend in the same process may
    read none, see :func:`compose_search_rows`); ``vectors`` likewise the vectors of the
    candidates (when asked); a caller reads what is not here; ``neighbors`` (possibly
    empty, with ``neighbors_of``, on a backend in the same process) is
    :meth:`Store.session_neighbors` for the ids in ``neighbors_of``: at least the
    candidates ranked within ``neighbor_depth`` in a channel of the first request (a backend
    may cover more of its candidates, where that saves a later call).
    """

    channels: tuple[Mapping[str, list[ChannelCandidate]], ...]
    memories: Mapping[str, Memory]
    vectors: Mapping[str, Vector] = field(default_factory=dict)
    neighbors: Mapping[str, list[tuple[str, int]]] = field(default_factory=dict)
    neighbors_of: frozenset[str] = frozenset()

    @property
    def candidate_ids(self) -> frozenset[str]:
        """Every id some channel proposed."""
        return frozenset(
            c.memory_id for found in self.channels for lst in found.values() for c in lst
        )


@dataclass(frozen=True)
class StoreStats:
    """Counts and facts ``recalld status`` shows."""

    path: str
    memories: int
    forgotten: int
    with_vectors: int
    fingerprint: str | None
    schema_version: int
    size_bytes: int
    by_type: Mapping[str, int] = field(default_factory=dict)
    sessions: int = 0
    oldest: datetime | None = None
    newest: datetime | None = None
    by_source: Mapping[str, int] = field(default_factory=dict)
    """Live memories per source kind (``direct``, ``file``, ``transcript`` ...)."""
    added_by_day: Mapping[str, int] = field(default_factory=dict)
    """Memories stored per UTC day (ISO date, oldest first), forgotten ones included: the
    store's growth."""
    unfinished_migration: bool = False
    """A ``recalld migrate`` into this tenant began and was not verified (it was interrupted):
    the memories here may be a partial copy, and only running it again makes them whole."""
    vector_index: str | None = None
    """Which index answers the tenant's vector searches, where the backend has a choice
    (PostgreSQL: ``own``, the tenant's own, or ``table``, the one of every tenant's rows)."""
    advice: tuple[str, ...] = ()
    """What the backend advises for this store (``recalld status`` shows it)."""


def day_counts(rows: Iterable[tuple[int, int]]) -> dict[str, int]:
    """``(days since 1970-01-01, count)`` rows as ISO date -> count (for
    :attr:`StoreStats.added_by_day`)."""
    epoch = date(1970, 1, 1)
    return {(epoch + timedelta(days=int(day))).isoformat(): int(n) for day, n in rows}


def migration_key(namespace: str) -> str:
    """The store fact that marks a namespace as the target of an unverified migration."""
    return f"migrating:{namespace}"


@dataclass(frozen=True)
class SourceRoot:
    """A folder (or file) registered for indexing, with the globs that pick its files."""

    path: str
    globs: tuple[str, ...]
    indexed_at: datetime | None = None
    name: str | None = None
    """The collection's name (unique per tenant); None for an unnamed root. Saving a root
    with no name keeps the name it had."""


@dataclass(frozen=True)
class SourceContext:
    """A context line of a root (``prefix`` ``""``) or of a sub-path under it."""

    root: str
    prefix: str
    """A ``/``-separated path relative to the root, without slashes at its ends."""
    text: str


@dataclass(frozen=True)
class SourceFile:
    """The index's record of one source file.

    ``content_hash`` and ``chunker`` describe the version whose chunks are in the store
    (None before the first successful index); ``size`` and ``mtime_ns`` are what the file
    looked like when last examined, so an unchanged file is skipped without reading it.
    """

    path: str
    root: str
    size: int
    mtime_ns: int
    status: str
    """``pending`` (work to do), ``indexed`` or ``error``."""
    content_hash: str | None = None
    chunker: str | None = None
    error: str | None = None
    indexed_at: datetime | None = None
    chunks: int = 0
    """Chunks of this file in the store (filled in by reads)."""


class Store(Protocol):
    """The persistence and candidate-generation contract of a memory store.

    A store handle is opened for a :class:`Tenancy`, and every method is confined to its
    visible namespaces: a memory of any other namespace is, to the handle, an unknown id
    (reads skip it, writes change nothing). The wall is in the store's own queries.
    """

    tenancy: Tenancy
    channels: frozenset[str]
    """The channels :meth:`candidates` has a reader for (every built-in channel on both
    backends); a request's asks of other channels go unanswered."""

    def insert(self, memories: Sequence[Memory], vectors: Vector | None) -> None:
        """Insert new memories (row i of ``vectors`` is memory i's); atomic."""

    def insert_unique(
        self, memories: Sequence[Memory], vectors: Vector | None, by_content: bool = True
    ) -> dict[str, str]:
        """Insert the memories that are still new when the write takes its lock, atomically
        with that check, so that adds at the same moment through other handles or processes
        store one copy: a memory whose id is stored with the same content, or (with
        ``by_content``) whose :data:`DedupKey` a live memory has, is skipped (see
        :func:`already_stored`). Returns {skipped id: the stored id it matches}.

        Raises:
            ConflictError: an id is stored with other content (nothing is written).
        """

    def replace(self, memory: Memory, vector: Vector | None) -> None:
        """Overwrite a stored memory (same id); ``vector`` None keeps the old one."""

    def get_many(self, ids: Sequence[str]) -> list[Memory]:
        """The memories with these ids, in the given order, unknown ids skipped."""

    def find_duplicates(self, keys: Sequence[DedupKey]) -> dict[DedupKey, str]:
        """Ids of live memories by :data:`DedupKey`."""

    def forget(self, ids: Sequence[str], *, hard: bool, at: datetime) -> int:
        """Soft-forget (hide) or hard-delete; returns how many rows changed."""

    def candidates(self, request: CandidateRequest) -> Mapping[str, list[ChannelCandidate]]:
        """Raw evidence per channel, best first: one list for every ask of ``request`` the
        store has a reader for (matched or not), under the ask's channel name, and no other.

        The score of each built-in channel (ranking decisions on them live in
        :mod:`recalld.retrieval.channels`):

        - ``semantic`` (:class:`NearestAsk`): the cosine similarity of the memory's vector
          to the ask's vector;
        - ``bm25`` (:class:`WordsAsk`): the BM25 relevance of the terms in the word index
          (0 up, higher is better; SQLite's ``bm25()`` negated);
        - ``trigram`` (:class:`TextAsk`): the BM25 relevance of the text's CJK 3-grams;
        - ``substring`` (:class:`TextAsk`): CJK pieces shorter than 3 characters found in
          the content; score 0, newest first;
        - ``entity`` (:class:`EntitiesAsk`): how many of the entities the memory carries;
        - ``temporal`` (:class:`RecentAsk`): the memory's reference time in UTC epoch
          seconds, newest first, inside the window when one is given;
        - ``window_semantic`` (:class:`NearestAsk` with a window): the cosine, for memories
          inside the window only.
        """

    def search_rows(
        self,
        requests: Sequence[CandidateRequest],
        *,
        vectors: bool = False,
        neighbor_radius: int = 0,
        neighbor_depth: int = 0,
        candidate_vectors: bool = False,
    ) -> SearchRows:
        """Every request's candidates, and what a remote backend sends with them so that a
        search needs no second round trip: their memory rows, when asked their vectors, and
        the session neighbours (radius ``neighbor_radius``) of the first request's
        candidates ranked within ``neighbor_depth``, with the neighbours' rows. A backend in
        the same process may send the candidates only (:class:`SearchRows`).
        ``candidate_vectors``: the vector of every candidate of the first request too (a
        vector channel answered by another call is completed from them)."""

    def parallel_reads(self) -> bool:
        """Whether a search should read its word channels on a second thread while it
        embeds the query and searches the vectors: calls from two threads run at the same
        time, cost no round trip (a backend in this process), and the word index is large
        enough for BM25 to take milliseconds."""

    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        """The stored vectors of these memories (ids without a vector are absent)."""

    def exact_vectors(self) -> bool:
        """Whether the vector channels score every vector (False: an approximate index, such
        as HNSW, may answer them, and may miss some of the nearest)."""

    def session_neighbors(
        self, ids: Sequence[str], radius: int
    ) -> dict[str, list[tuple[str, int]]]:
        """For each memory with a session, the live memories of that session at most
        ``radius`` places before or after it (by ``Memory.position``), as (id, offset)
        pairs."""

    def record_access(self, ids: Sequence[str], at: datetime) -> None:
        """Bump access counts and last-accessed times (a cheap write)."""

    def get_fingerprint(self) -> str | None: ...

    def any_vectors(self) -> bool:
        """Whether the store holds any vector, of any tenant: one store has one embedder."""

    def set_fingerprint(self, fingerprint: str) -> None: ...

    def export(self, batch: int) -> Iterator[list[tuple[Memory, Vector | None]]]:
        """Every visible memory (forgotten ones too) with its vector, in storage order."""

    def iter_contents(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        """All (id, text to embed) pairs, in batches, for re-embedding."""

    def swap_vectors(self, vectors: Mapping[str, Vector], fingerprint: str) -> None:
        """Replace the visible memories' vectors and the fingerprint in one transaction.

        Raises:
            EmbedderMismatchError: ``fingerprint`` is new and other tenants have vectors.
        """

    def stats(self) -> StoreStats: ...

    def mark_migration(self, unfinished: bool) -> None:
        """Mark (or clear) the tenant's namespace as the target of an unverified migration."""

    def unfinished_migration(self) -> bool:
        """Whether a visible namespace is marked by :meth:`mark_migration`."""

    def close(self) -> None: ...

    # Last in the class: a method named ``list`` shadows the builtin in later annotations.
    def list(
        self, filters: MemoryFilter, *, limit: int, offset: int = 0, newest_first: bool = True
    ) -> list[Memory]:
        """Memories passing ``filters`` ordered by reference time."""


@runtime_checkable
class SourceIndex(Protocol):
    """The bookkeeping of indexed files (roots, files, their chunks), a separate contract
    so that a backend can implement memories first. Like :class:`Store`, it is confined to
    the tenant: roots and files belong to the tenant's own namespace, and so do the chunks.
    """

    def save_source_root(self, root: SourceRoot) -> None:
        """Register a root, or update its globs and last-indexed time."""

    def source_roots(self) -> list[SourceRoot]: ...

    def source_files(self, roots: Sequence[str] | None = None) -> list[SourceFile]:
        """Tracked files (of these roots, or all), with their chunk counts, by path."""

    def save_source_files(self, files: Sequence[SourceFile]) -> None:
        """Insert or update file records (not their chunks) in one transaction."""

    def replace_file_chunks(
        self,
        file: SourceFile,
        memories: Sequence[Memory],
        vectors: Vector | None,
        text: str | None = None,
    ) -> None:
        """Swap a file's chunks, record and text in ONE transaction.

        Deletes the file's chunks, inserts ``memories`` (row i of ``vectors`` is memory
        i's), saves ``file``'s record and, when given, the ``text`` the chunks were made
        from: a crash leaves the file fully old or fully new.
        """

    def remove_source_files(self, paths: Sequence[str]) -> int:
        """Delete these files' chunks and records in one transaction; returns chunks deleted."""

    def source_contexts(self) -> list[SourceContext]:
        """The tenant's context lines, by root and prefix."""

    def save_source_context(self, root: str, prefix: str, text: str | None) -> None:
        """Set the context line of ``root`` at ``prefix`` (``text`` None removes it)."""

    def remove_source_root(self, path: str) -> int:
        """Forget a root: its record, context lines, files, their texts and chunks, in one
        transaction; returns the chunks deleted."""

    def source_texts(self, paths: Sequence[str]) -> dict[str, str]:
        """The indexed texts of these files (those that have one), by path."""

    def save_source_texts(self, texts: Mapping[str, str]) -> None:
        """Keep these files' indexed texts (by path), as a copy between stores does."""


def neighbors_in_sessions(
    rows: Sequence[tuple[str, str, str]], ids: Sequence[str], radius: int
) -> dict[str, list[tuple[str, int]]]:
    """The ``session_neighbors`` answer from ``(id, namespace, session)`` rows ordered by
    namespace, session and position: for each of ``ids``, the members up to ``radius`` places
    either side, with their offset (negative before, positive after). Both backends share it,
    so they agree on what a neighbour is."""
    order: dict[tuple[str, str], list[str]] = {}
    for memory_id, namespace, session in rows:
        order.setdefault((namespace, session), []).append(memory_id)
    wanted = set(ids)
    out: dict[str, list[tuple[str, int]]] = {}
    for members in order.values():
        for position, memory_id in enumerate(members):
            if memory_id not in wanted:
                continue
            low, high = max(0, position - radius), min(len(members), position + radius + 1)
            out[memory_id] = [(members[i], i - position) for i in range(low, high) if i != position]
    return out


def near_ids(found: Mapping[str, list[ChannelCandidate]], depth: int) -> list[str]:
    """Ids ranked within ``depth`` in any channel, in channel then rank order, once each."""
    return list(
        dict.fromkeys(c.memory_id for lst in found.values() for c in lst if c.rank <= depth)
    )


def compose_search_rows(store: Store, requests: Sequence[CandidateRequest]) -> SearchRows:
    """:meth:`Store.search_rows` for a store in the same process, where a call costs no
    round trip: the candidates only. The pipeline reads the rows, vectors and neighbours of
    the few candidates it keeps (a search keeps a hundred of its several hundred
    candidates, and asks for the neighbours of its top 20 after adjusting them)."""
    return SearchRows(tuple(store.candidates(r) for r in requests), {})


@runtime_checkable
class BulkLoading(Protocol):
    """A store that loads many :meth:`Store.insert` calls faster inside ``bulk_load()``
    (PostgreSQL: the vector index is built once at the end); same results, same checks."""

    def bulk_load(self) -> AbstractContextManager[bool]:
        """A block whose inserts may be loaded in bulk; yields whether they are."""


def bulk_loading(store: object) -> AbstractContextManager[bool]:
    """``store.bulk_load()`` for a :class:`BulkLoading` store, else a block that loads as
    usual (and yields False)."""
    return store.bulk_load() if isinstance(store, BulkLoading) else nullcontext(False)


@runtime_checkable
class KeyStore(Protocol):
    """API keys kept in the store, across tenants (a key names its tenant): the server's
    authentication reads them, ``recalld keys`` writes them. Only hashes are stored."""

    def add_key(self, key: ApiKey, secret_hash: str) -> None:
        """Store a new key (its id must be new)."""

    def find_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        """The key with this id and its secret's hash (revoked keys too), or None."""

    def list_keys(self) -> list[ApiKey]:
        """Every key, oldest first (revoked ones too)."""

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """Mark the key revoked; False when no such key exists (or it was already)."""

    def active_keys(self) -> int:
        """How many keys are not revoked."""


@runtime_checkable
class IndexBuilding(Protocol):
    """A store that builds, for its tenant seen alone, indexes of its own rows on demand
    (PostgreSQL in a database shared by many tenants; SQLite builds its own by itself)."""

    def build_index(self, kind: IndexKind, *, drop: bool = False) -> IndexBuild:
        """Build the tenant's ``kind`` index (``drop``: remove it); handles opened
        afterwards use it. Raises InvalidInputError for a handle seeing shared namespaces."""

    def advised_indexes(self) -> frozenset[IndexKind]:
        """The indexes the tenant lacks and its size calls for (``recalld status`` says
        why in :attr:`StoreStats.advice`)."""


_T = TypeVar("_T")


def guard_public_methods(
    guard: Callable[[Any], AbstractContextManager[None]],
) -> Callable[[type[_T]], type[_T]]:
    """A class decorator running every public method (generators too) of a store inside
    ``guard(store)``: how a backend turns its driver's failures into :class:`StoreError`
    (and, for SQLite, serialises calls on its connection)."""

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isgeneratorfunction(method):

            @functools.wraps(method)
            def generator(self: Any, *args: Any, **kwargs: Any) -> Any:
                with guard(self):
                    yield from method(self, *args, **kwargs)

            return generator

        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            with guard(self):
                return method(self, *args, **kwargs)

        return call

    def decorate(cls: type[_T]) -> type[_T]:
        for name, method in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(method):
                setattr(cls, name, wrap(method))
        return cls

    return decorate
