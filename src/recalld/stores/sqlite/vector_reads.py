"""The SQLite store's readers that hold state: the vector channels' (``semantic``,
``window_semantic``) and the word channel's (``bm25``).

The other readers need nothing but a connection (:data:`.readers.READERS`); these keep,
for the store handle's lifetime:

- the vector mirror (:mod:`.vectors`), shared by every thread's connection, so every
  vector search holds :attr:`VectorReads.lock`;
- the saved ANN index opened without loading every vector (:mod:`.lazy_vectors`), tried
  once per process, on the first vector search while the mirror is still empty, and left
  for the mirror for good once it cannot answer;
- the word channel's engines, asked in order (:mod:`.word_engines`).

Equal scores at the cut are ordered by the memory's id, as on PostgreSQL: each search
fetches :data:`TIE_MARGIN` more neighbours than it keeps.

A search that asks for both vector channels may have the time window's rows counted and
listed on another thread (:meth:`VectorReads.window_rows_beside`) while this one walks the
ANN graph for the nearest memories: that part of ``window_semantic`` is SQL alone, on the
other thread's own connection, and needs no vector held under :attr:`VectorReads.lock`;
so is the ranking of a large window's rows by the index's copies where the mapped copies
file holds them all (:class:`.lazy_vectors.Preranked`, used only while it stands).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.errors import EmbedderMismatchError
from recalld.records import TimeRange
from recalld.stores.asks import ChannelCandidate, NearestAsk, WordsAsk, ranked
from recalld.stores.base import Vector
from recalld.stores.sqlite import queries as q, readers
from recalld.stores.sqlite.lazy_vectors import LazyAnn, Preranked
from recalld.stores.sqlite.vectors import VectorMirror, listed_pks
from recalld.stores.sqlite.word_engines import word_engines
from recalld.threads import LazyPool

TIE_MARGIN = 16
"""Extra nearest neighbours fetched so that equal cosines at the cut are ordered by id."""
WINDOW_THREADS = 4
"""Threads that list time windows' rows while searches walk the ANN graph (one per search
in flight; more searches at once wait for one)."""
_window_threads = LazyPool(WINDOW_THREADS, "recalld-window")


@dataclass(frozen=True)
class WindowRows:
    """A time window's rows as ``window_semantic`` decides on them: counted up to ``wide``
    + 1 (:meth:`VectorReads._window_rows`), and listed (``pks``, those passing the filters)
    when no more than ``wide``."""

    wide: int
    count: int
    pks: npt.NDArray[np.int64] | None
    preranked: Preranked | None = None
    """The rows listed ranked by their copies (see :meth:`LazyAnn.preranked`)."""


class VectorReads:
    """The vector and word readers of one store handle, and what they keep.

    Args:
        path: the store's file, or ``":memory:"`` (no saved index, no word index).
        connection: the calling thread's connection to the store.
        visible: the handle's namespaces.
    """

    def __init__(
        self, path: str, connection: Callable[[], sqlite3.Connection], visible: tuple[str, ...]
    ) -> None:
        self._connection = connection
        self._visible = visible
        self.mirror = VectorMirror(None if path == ":memory:" else Path(path + ".ann"))
        """Every vector in memory, or an ANN index over them past its size."""
        self.lock = threading.RLock()
        """Held through every vector search: the mirror is shared by the threads."""
        self.lazy: LazyAnn | None = None
        """Searches the saved ANN index without loading every vector (see lazy_vectors)."""
        self.lazy_tried = False
        self._kept = threading.local()
        """Per thread, inside :meth:`keeping_vectors`: the vectors its vector searches
        returned (``into``); and the pks its readers noted (``pks``, until its next block)."""
        self.word_engines = word_engines(path)
        """The word channel's engines, asked in order (the word index of a large store when
        tantivy is installed, then FTS5)."""

    @property
    def channel_readers(self) -> dict[str, readers.Reader]:
        """The readers of the channels these answer."""
        return {
            "semantic": self.semantic,
            "window_semantic": self.window_semantic,
            "bm25": self.words,
        }

    @contextmanager
    def keeping_vectors(self) -> Iterator[dict[str, Vector]]:
        """Within the block, the vector searches of this thread put the vectors of the
        memories they return (the exact ones they scored) into the dict yielded, by memory
        id, so the search need not read them again by id (an id's read costs an index seek,
        :meth:`LazyAnn.vectors_for`). Only where an id names one row: with one namespace
        visible (several may each hold the id, and a read by id prefers the tenant's)."""
        kept: dict[str, Vector] = {}
        one = len(self._visible) == 1
        self._kept.into = kept if one else None
        self._kept.pks = {} if one else None
        try:
            yield kept
        finally:
            self._kept.into = None

    def noting_pks(self) -> dict[str, int] | None:
        """Inside :meth:`keeping_vectors`, the dict where this thread's readers note the
        pk of each memory id they find (:attr:`.readers.Scope.pks_of`), else None."""
        if getattr(self._kept, "into", None) is None:
            return None
        noted: dict[str, int] | None = self._kept.pks
        return noted

    def known_pks(self) -> dict[str, int]:
        """The pks the readers of this thread's last :meth:`keeping_vectors` block noted, by
        memory id: the rest of that search reads vectors by id through them, not the
        ``(namespace, id)`` index (kept until the thread's next block, which every search
        opens: only its own later reads use them, as of its reads; a pk whose row is gone
        from the vectors file is not found there, and its id is read from the table)."""
        noted: dict[str, int] | None = getattr(self._kept, "pks", None)
        return {} if noted is None else noted

    def forget_pks(self) -> None:
        """Drop the pks this thread's last :meth:`keeping_vectors` block noted: a search
        that opens no block must not read by another search's pks."""
        self._kept.pks = None

    def _scored(self) -> dict[str, Vector] | None:
        """A dict for a search's scored vectors inside :meth:`keeping_vectors`, else None."""
        return None if getattr(self._kept, "into", None) is None else {}

    def _kept_of(
        self, found: list[tuple[str, float]], limit: int, scored: dict[str, Vector] | None
    ) -> list[ChannelCandidate]:
        """The channel's answer from a search's (id, score) pairs: the ``limit`` best, ties
        by id; the vectors ``scored`` of those kept go to :meth:`keeping_vectors`'s dict."""
        kept = _ties_by_id(found, limit)
        into: dict[str, Vector] | None = getattr(self._kept, "into", None)
        if into is not None and scored:
            into.update((i, scored[i]) for i, _ in kept if i in scored)
        return ranked(kept)

    @property
    def _db(self) -> sqlite3.Connection:
        return self._connection()

    def words(self, ask: WordsAsk, scope: readers.Scope) -> list[ChannelCandidate]:
        """The word channel: the first of the word engines that answers."""
        return readers.words(self.word_engines, ask, scope)

    def semantic(self, ask: NearestAsk, scope: readers.Scope) -> list[ChannelCandidate]:
        """The semantic channel: the nearest vectors, from the ANN index or the mirror."""
        with self.lock:
            return self._semantic_locked(ask, scope)

    def _semantic_locked(self, ask: NearestAsk, scope: readers.Scope) -> list[ChannelCandidate]:
        assert ask.vector is not None
        hidden: npt.NDArray[np.int64] | None = None
        keep: npt.NDArray[np.int64] | None = None
        if scope.trivial:
            # Hidden: forgotten memories and other namespaces' (both usually few or none).
            outside, outside_params = q.outside_sql(self._visible)
            hidden = listed_pks(
                self._db,
                "SELECT pk FROM memories WHERE forgotten_at IS NOT"
                f" NULL UNION ALL SELECT pk FROM memories WHERE {outside}",
                outside_params,
            )
        else:
            keep = self.pks_where(scope.where, scope.params)
        return self.nearest(ask.vector, ask.limit, hidden, keep, ask.near_memory)

    def window_rows_beside(
        self, asks: Mapping[str, object], scope: readers.Scope
    ) -> Future[WindowRows] | None:
        """When ``asks`` want both vector channels from the saved ANN index and reads may
        spread (``scope.spread``): the window's rows counted, and listed if few enough, on
        another thread (its own connection) while this one searches the nearest vectors;
        hand the future to :meth:`window_semantic`. Else None."""
        ask = asks.get("window_semantic")
        if not isinstance(ask, NearestAsk) or "semantic" not in asks or not scope.spread:
            return None
        with self.lock:  # the index as it is (window_semantic counts again if it moved)
            lazy = self.lazy
            wide = None if lazy is None else self._wide(lazy, ask.limit)
        if wide is None:
            return None
        where, params = readers.within(ask.window, scope.where, scope.params)
        return _window_threads.submit(self._window_listing, ask, where, params, wide)

    def _window_listing(
        self, ask: NearestAsk, where: str, params: list[object], wide: int
    ) -> WindowRows:
        count = self._window_rows(ask.window, wide + 1)
        if count > wide:
            return WindowRows(wide, count, None)
        pks = self.pks_where(where, params)
        lazy = self.lazy  # read without the lock: what it ranks is checked before use
        ranked = None
        if lazy is not None and ask.vector is not None and len(pks) <= lazy.subset_exact_rows:
            ranked = lazy.preranked(pks, ask.vector, ask.limit + TIE_MARGIN)
        return WindowRows(wide, count, pks, ranked)

    def window_semantic(
        self, ask: NearestAsk, scope: readers.Scope, listed: Future[WindowRows] | None = None
    ) -> list[ChannelCandidate]:
        """The nearest vectors inside the ask's time window (``listed``: its rows, from
        :meth:`window_rows_beside`)."""
        assert ask.vector is not None
        query_vector, limit = ask.vector, ask.limit
        where, params = readers.within(ask.window, scope.where, scope.params)
        beside = None if listed is None else listed.result()  # before the lock: SQL alone
        keep: npt.NDArray[np.int64] | None = None
        ranked: Preranked | None = None
        with self.lock:
            lazy = self.lazy_index()
            # A window too large to list, or holding a share of the rows large enough for
            # the index's candidates to find its nearest (a year of a 100k store: 50k rows,
            # half the candidates pass), is checked on the index's candidates alone.
            if lazy is not None:
                fetch = limit + TIE_MARGIN
                wide = self._wide(lazy, limit)
                if beside is not None and beside.wide == wide:
                    count, keep, ranked = beside.count, beside.pks, beside.preranked
                else:
                    count = self._window_rows(ask.window, wide + 1)
                if count > wide:
                    _check_dimension(query_vector, lazy.dimension)
                    scored = self._scored()
                    found = lazy.search_passing(
                        self._db, query_vector, fetch, where, params, scored
                    )
                    if found is not None:
                        return self._kept_of(found, limit, scored)
            if keep is None:
                keep = self.pks_where(where, params)
            return self.nearest(query_vector, limit, None, keep, preranked=ranked)

    @staticmethod
    def _wide(lazy: LazyAnn, limit: int) -> int:
        """The most rows of a window listed and searched exactly (see window_semantic)."""
        return min(lazy.subset_exact_rows, lazy.passing_rows(limit + TIE_MARGIN))

    def nearest(
        self,
        query: Vector,
        limit: int,
        hidden: npt.NDArray[np.int64] | None,
        keep: npt.NDArray[np.int64] | None,
        near_memory: bool = False,
        preranked: Preranked | None = None,
    ) -> list[ChannelCandidate]:
        """The ``limit`` nearest vectors among rows not ``hidden`` (or only ``keep`` ones):
        from the saved ANN index alone while it can answer, else from the mirror
        (``near_memory``: :attr:`NearestAsk.near_memory`; ``preranked``: ``keep`` ranked by
        the index's copies already, :meth:`LazyAnn.preranked`)."""
        lazy = self.lazy_index()
        if lazy is not None:
            _check_dimension(query, lazy.dimension)
            scored = self._scored()
            fetch = limit + TIE_MARGIN
            found = lazy.search(
                self._db, query, fetch, hidden, keep, near_memory, scored, preranked
            )
            if found is not None:
                return self._kept_of(found, limit, scored)
            self.lazy = None  # the mirror answers from now on in this process
        mirror = self.mirror
        mirror.refresh(self._db)
        if mirror.dimension is not None:
            _check_dimension(query, mirror.dimension)
        allowed: npt.NDArray[np.bool_] | None = None
        if keep is not None:
            allowed = mirror.rows_with(keep)
        elif hidden is not None and len(hidden):
            allowed = ~mirror.rows_with(hidden)
        scored = self._scored()
        found = mirror.search_ids(query, limit + TIE_MARGIN, allowed, near_memory, scored)
        return self._kept_of(found, limit, scored)

    def exact(self) -> bool:
        """Whether the vector channels score every vector (no ANN index answers)."""
        # Read without the lock (held through a vector search): two attributes a search
        # sets once; a stale answer only reads vectors that were not needed.
        return self.lazy is None and not self.mirror.uses_ann

    def lazy_index(self) -> LazyAnn | None:
        """The saved ANN index, opened on the first vector search of a process whose mirror
        is still empty, while the store is past the mirror's ANN size."""
        if not self.lazy_tried and self.mirror.size == 0:
            self.lazy_tried = True
            mirror = self.mirror
            self.lazy = LazyAnn.open(
                self._db, mirror.index_path, mirror.subset_exact_rows, mirror.build_threads
            )
        lazy = self.lazy
        if lazy is None:
            return None
        if not lazy.catch_up(self._db) or lazy.size < self.mirror.ann_min_rows:
            self.lazy = None
            return None
        return lazy

    def search_exactly(self, words: bool, vectors: bool) -> None:
        """From now on FTS5 scores every matching row (``words``), and every vector is
        scored instead of reading the ANN index (``vectors``)."""
        if words:
            self.word_engines = [readers.FTS5]
        if vectors:
            self.mirror.ann_min_rows = 2**62
            self.lazy, self.lazy_tried = None, True

    def pks_where(self, where: str, params: list[object]) -> npt.NDArray[np.int64]:
        """The pks of the rows of ``memories m`` that pass ``where``: a filtered vector
        search's rows."""
        return listed_pks(self._db, f"SELECT m.pk FROM memories m WHERE {where}", params)

    def _window_rows(self, window: TimeRange | None, cap: int) -> int:
        """How many rows of the handle's namespaces the time ``window`` holds, counted
        up to ``cap`` on the (namespace, ref_time) index alone: an upper bound of what the
        window keeps after the other filters."""
        wall, params = q.namespace_sql(self._visible)
        where, params = readers.within(window, wall, list(params))
        (rows,) = self._db.execute(q.capped_count_sql(where), [*params, cap]).fetchone()
        return int(rows)


def _check_dimension(query: Vector, dimension: int) -> None:
    if query.shape[-1] != dimension:
        raise EmbedderMismatchError(
            f"query vector has {query.shape[-1]} dimensions, the store's vectors have {dimension}"
        )


def _ties_by_id(pairs: Any, limit: int) -> list[tuple[str, float]]:
    """(id, score) pairs best first, equal scores by the memory's text id (kept by
    ``recalld migrate``, unlike row numbers), so that both backends break ties alike."""
    return sorted(pairs, key=lambda p: (-p[1], p[0]))[:limit]
