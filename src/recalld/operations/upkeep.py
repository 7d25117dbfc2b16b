"""Upkeep: the embedder checked against the store's vectors, re-embedding, status figures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recalld.errors import EmbedderMismatchError, InvalidInputError
from recalld.operations.writing import EMBED_SPAN, Progress
from recalld.providers.embedders import Embedder, Fingerprint, Vectors
from recalld.stores.base import (
    IndexBuild,
    IndexBuilding,
    IndexKind,
    SourceIndex,
    Store,
    StoreStats,
)

if TYPE_CHECKING:
    from recalld.sources.status import SourceStatus


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


def check_fingerprint(store: Store, fingerprint: Fingerprint) -> None:
    """Adopt ``fingerprint`` when the store holds no vector it could be mixed with;
    otherwise refuse an embedder other than the one that made the store's vectors."""
    stored = store.get_fingerprint()
    if stored == fingerprint.to_json():
        return
    if stored is None or not store.any_vectors():
        # No vector exists that the new embedder's could be mixed with: adopt it.
        store.set_fingerprint(fingerprint.to_json())
        return
    theirs = Fingerprint.from_json(stored).describe()
    raise EmbedderMismatchError(
        f"this store's vectors were made by {theirs}, but the configured embedder is "
        f"{fingerprint.describe()}; run `recalld reindex` to re-embed every memory "
        "with the configured embedder (nothing is lost), or configure the old one"
    )


def reindex(store: Store, embedder: Embedder, cached: Embedder, progress: Progress | None) -> int:
    """Every memory re-embedded with ``cached`` (``embedder`` behind the cache), then the
    vectors swapped in one transaction; the number of memories re-embedded."""
    vectors: dict[str, Vectors] = {}
    for batch in store.iter_contents(EMBED_SPAN):
        embedded = cached.embed_documents([content for _, content in batch], progress)
        vectors.update(zip((i for i, _ in batch), embedded.vectors, strict=True))
    store.swap_vectors(vectors, embedder.fingerprint.to_json())
    return len(vectors)


def status_figures(
    store: Store, loaded: Embedder | None
) -> tuple[StoreStats, bool | None, SourceStatus | None]:
    """The store's figures, whether the ``loaded`` embedder (None: not loaded yet) made
    its vectors, and its indexed workspaces compared with the disk."""
    stats = store.stats()
    matches = None
    if loaded is not None and stats.fingerprint is not None:
        matches = stats.fingerprint == loaded.fingerprint.to_json()
    from recalld.sources.status import source_status

    sources = source_status(store) if isinstance(store, SourceIndex) else None
    return stats, matches, sources


def build_index(
    store: Store, kind: IndexKind, *, drop: bool, progress: Callable[[str], None] | None
) -> IndexBuild:
    """:meth:`recalld.engine.MemoryEngine.build_index` on ``store``."""
    if not isinstance(store, IndexBuilding):
        raise InvalidInputError(
            f"this store builds no {kind} index on demand: it needs a PostgreSQL store "
            "(--db postgresql://...); an SQLite store keeps its indexes by itself"
        )
    if progress is not None and not drop:
        what = {"vectors": "vector index", "words": "word postings"}[kind]
        progress(f"building the {what} of tenant {store.tenancy.tenant} ...")
    return store.build_index(kind, drop=drop)
