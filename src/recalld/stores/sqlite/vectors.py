"""Vector search for the SQLite store: an exact float32 matrix, plus an ANN index at scale.

Why (measured in docs/benchmarks.md, "Vector search"): an exact matrix-vector product over
a numpy float32 matrix answers 100k x 384 in tens of milliseconds on 2 cores, with no
extension to load (sqlite-vec needs ``enable_load_extension``, which many Python builds
lack, and its brute force was 5x slower), and it is exact. Exact cost grows linearly, so from
:data:`ANN_MIN_ROWS` vectors a usearch HNSW index (optional extra ``recalld[ann]``) proposes
candidates, which are then re-scored exactly from the matrix: returned scores are always
exact cosines, and a stale or missing index can only cost recall, never correctness.

The mirror follows the ``vectors`` table incrementally. Rows carry a growing ``seq``, and
a ``vector_generation`` counter (bumped by a trigger on delete) says that rows went away.
A refresh reads, in one snapshot, the rows with a newer ``seq`` (new or updated vectors,
overwritten in place) and, only when the generation moved and the counts show rows gone,
the list of pks to drop. Another process's writes are seen on the next search.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from recalld.errors import install_hint
from recalld.stores.base import Vector
from recalld.stores.sqlite import exact_scan, vector_file
from recalld.stores.sqlite.exact_scan import cosines
from recalld.stores.sqlite.vector_index import AnnIndex, MirrorRows, ann_available

log = logging.getLogger("recalld")

ANN_MIN_ROWS = 50_000
"""From this many live vectors an ANN index proposes candidates. Below it exact search is
cheap (about 15 ms at 50k on 2 cores); above it exact cost grows linearly, and at 100k the
index answered in 1.8 ms with recall@40 0.984 against exact (docs/design/scale-history.md): a
100k hybrid search fell from 149 to 73 ms p50 in the same session with it. Was 200k; no
benchmark store (a few thousand memories) comes near either, so their rankings are the
same. The index is built once, on the first search past the threshold, and saved."""
RESCORE_FACTOR = 2
"""Candidates fetched from the ANN index per wanted hit, then re-scored exactly."""
MAX_ANN_CANDIDATES = 4096
"""Beyond this many ANN candidates (a very selective filter), exact search over the allowed
rows is cheaper and certain."""
SUBSET_EXACT_ROWS = 50_000
"""A filter leaving at most this many rows is answered exactly over those rows alone."""
LOAD_CHUNK = 4096
"""Rows fetched per ``fetchmany`` while loading, so no list of all rows is ever built."""
COMPACT_FRACTION = 0.125
"""Deleted rows are kept as tombstones until they pass this fraction of the matrix."""

Mask = npt.NDArray[np.bool_]
_Item = TypeVar("_Item", bound=np.generic)


@dataclass(frozen=True)
class Changes:
    """What one refresh changed: pks dropped, and rows (pk, seq, vector, memory id) added
    or replaced."""

    dropped: npt.NDArray[np.int64]
    pks: npt.NDArray[np.int64]
    seqs: npt.NDArray[np.int64]
    vectors: npt.NDArray[np.float32]
    ids: npt.NDArray[np.object_]


class VectorMirror:
    """The store's vectors as one matrix, kept in step with the ``vectors`` table.

    Args:
        index_path: where the ANN index is persisted (``None``: in memory only).
        ann_min_rows: live vectors from which the ANN index is used.
        subset_exact_rows: a filter leaving at most this many rows is answered exactly.
        build_threads: threads that insert into the ANN index (``None``: every core). One
            thread makes the index, and so its approximate answers, reproducible.
    """

    def __init__(
        self,
        index_path: Path | None = None,
        ann_min_rows: int = ANN_MIN_ROWS,
        subset_exact_rows: int = SUBSET_EXACT_ROWS,
        build_threads: int | None = None,
    ) -> None:
        self.index_path = index_path
        self.build_threads = build_threads
        self.ann_min_rows = ann_min_rows
        self.subset_exact_rows = subset_exact_rows
        self.dimension: int | None = None
        self._vectors: npt.NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        self._pks: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._seqs: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._ids: npt.NDArray[np.object_] = np.zeros(0, dtype=object)
        """The memory id of each row, so a search answers with ids without a lookup."""
        self._live: Mask = np.zeros(0, dtype=np.bool_)
        self._row_of: npt.NDArray[np.int64] = np.full(1, -1, dtype=np.int64)
        self._count = 0
        self._dead = 0
        self._seq = 0
        self._generation = -1
        self._ann: AnnIndex | None = None
        self._norm_max = 0.0
        """At least the largest norm of a row (:func:`exact_scan.best_rows`)."""
        self._warned = False
        self._lock = threading.RLock()

    # -- views ---------------------------------------------------------------------------

    @property
    def pks(self) -> npt.NDArray[np.int64]:
        """The pk of each matrix row (tombstoned rows included; see :meth:`live`)."""
        return self._pks[: self._count]

    @property
    def matrix(self) -> npt.NDArray[np.float32]:
        return self._vectors[: self._count]

    @property
    def live(self) -> Mask:
        return self._live[: self._count]

    @property
    def size(self) -> int:
        """How many live vectors the mirror holds."""
        return self._count - self._dead

    @property
    def uses_ann(self) -> bool:
        return self._ann is not None

    def rows_with(self, pks: npt.NDArray[np.int64]) -> Mask:
        """A row mask that is True exactly for the rows of these pks."""
        mask = np.zeros(self._count, dtype=np.bool_)
        pks = pks[(pks >= 0) & (pks < len(self._row_of))]
        rows = self._row_of[pks]
        mask[rows[rows >= 0]] = True
        return mask

    # -- refresh -------------------------------------------------------------------------

    def refresh(self, db: sqlite3.Connection) -> None:
        """Catch up with the table: first a full load, then only what changed."""
        with self._lock:
            changes = self._read_changes(db)
            if changes is None:
                return
            self._apply(changes)
            if self._ann is not None:
                self._ann.apply(changes.dropped, changes.pks, changes.vectors, self._seq)
                if self._ann.stale:
                    self._ann = None  # too many removals: rebuilt on the next search

    def _read_changes(self, db: sqlite3.Connection) -> Changes | None:
        """Read, in one snapshot, the rows new since the last refresh and the pks gone."""
        own = not db.in_transaction
        if own:
            db.execute("BEGIN")
        try:
            generation = int(
                db.execute("SELECT value FROM meta WHERE key = 'vector_generation'").fetchone()[0]
            )
            newest = db.execute("SELECT MAX(seq) FROM vectors").fetchone()[0] or 0
            if newest == self._seq and generation == self._generation:
                return None
            total = db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
            pks, seqs, vectors, ids = self._read_rows(db, newest, total)
            dropped = np.zeros(0, dtype=np.int64)
            if generation != self._generation and self._count:
                dropped = self._dropped(db, pks, total)
            self._generation = generation
            self._seq = max(self._seq, newest)
            return Changes(dropped, pks, seqs, vectors, ids)
        finally:
            if own:
                db.execute("COMMIT")

    def _dropped(
        self, db: sqlite3.Connection, fresh: npt.NDArray[np.int64], total: int
    ) -> npt.NDArray[np.int64]:
        """Pks the mirror holds that the table lost (deleted, not replaced).

        Counting first avoids reading every pk when the only deletions were updates: rows
        gone from the mirror's set = held + fresh - total, and the updated ones are the
        fresh pks already held.
        """
        held = self.pks[self.live]
        updated = int(np.count_nonzero(self.rows_with(fresh)))
        if len(held) + len(fresh) - total == updated:
            return np.zeros(0, dtype=np.int64)
        # Served by the pk index, which is far smaller than the table of blobs.
        current = listed_pks(db, "SELECT pk FROM vectors")
        return np.setdiff1d(held, current)

    def _read_rows(
        self, db: sqlite3.Connection, newest: int, total: int
    ) -> tuple[
        npt.NDArray[np.int64],
        npt.NDArray[np.int64],
        npt.NDArray[np.float32],
        npt.NDArray[np.object_],
    ]:
        """Rows with ``seq`` in ``(self._seq, newest]``, read in chunks into arrays."""
        cursor = db.execute(
            "SELECT v.seq, v.pk, v.vector, m.id FROM vectors v LEFT JOIN memories m"
            " ON m.pk = v.pk WHERE v.seq > ? AND v.seq <= ? ORDER BY v.seq",
            (self._seq, newest),
        )
        capacity = total if self._count == 0 else LOAD_CHUNK
        pks = np.zeros(capacity, dtype=np.int64)
        seqs = np.zeros(capacity, dtype=np.int64)
        ids: npt.NDArray[np.object_] = np.zeros(capacity, dtype=object)
        vectors: npt.NDArray[np.float32] | None = None
        done = 0
        while rows := cursor.fetchmany(LOAD_CHUNK):
            chunk = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
            chunk = chunk.reshape(len(rows), -1)
            if vectors is None:
                vectors = np.zeros((capacity, chunk.shape[1]), dtype=np.float32)
            if done + len(rows) > len(pks):
                grown = max(done + len(rows), 2 * len(pks))
                pks, seqs, vectors = _grown(pks, grown), _grown(seqs, grown), _grown(vectors, grown)
                ids = _grown(ids, grown)
            pks[done : done + len(rows)] = [r[1] for r in rows]
            seqs[done : done + len(rows)] = [r[0] for r in rows]
            ids[done : done + len(rows)] = [r[3] for r in rows]
            vectors[done : done + len(rows)] = chunk
            done += len(rows)
        if vectors is None:
            vectors = np.zeros((0, self.dimension or 0), dtype=np.float32)
        return pks[:done], seqs[:done], vectors[:done], ids[:done]

    def _apply(self, changes: Changes) -> None:
        if len(changes.dropped):
            self._kill(changes.dropped)
        if len(changes.pks):
            self._upsert(changes)
        if self._dead > max(1024, COMPACT_FRACTION * self._count):
            self._compact()

    def _upsert(self, changes: Changes) -> None:
        """Overwrite the rows of known pks in place; append the others."""
        if self.dimension is None or changes.vectors.shape[1] != self.dimension:
            self._reset(changes.vectors.shape[1])
        if self._count == 0:
            self._adopt(changes.pks, changes.seqs, changes.vectors, changes.ids)
            return
        in_range = changes.pks < len(self._row_of)
        known = np.zeros(len(changes.pks), dtype=np.bool_)
        known[in_range] = self._row_of[changes.pks[in_range]] >= 0
        if known.any():
            rows = self._row_of[changes.pks[known]]
            self._vectors[rows] = changes.vectors[known]
            self._norm_max = max(self._norm_max, _norm_max(changes.vectors[known]))
            self._seqs[rows] = changes.seqs[known]
            self._ids[rows] = changes.ids[known]
        fresh = ~known
        self._append(
            changes.pks[fresh], changes.seqs[fresh], changes.vectors[fresh], changes.ids[fresh]
        )

    def _reset(self, dimension: int) -> None:
        self.dimension = dimension
        self._vectors = np.zeros((0, dimension), dtype=np.float32)
        self._pks = np.zeros(0, dtype=np.int64)
        self._seqs = np.zeros(0, dtype=np.int64)
        self._ids = np.zeros(0, dtype=object)
        self._live = np.zeros(0, dtype=np.bool_)
        self._row_of = np.full(1, -1, dtype=np.int64)
        self._count = self._dead = 0
        self._norm_max = 0.0
        self._ann = None

    def _adopt(
        self,
        pks: npt.NDArray[np.int64],
        seqs: npt.NDArray[np.int64],
        vectors: Vector,
        ids: npt.NDArray[np.object_],
    ) -> None:
        """Take freshly read arrays as the buffers (a first load copies nothing)."""
        self._vectors, self._pks, self._seqs, self._ids = vectors, pks, seqs, ids
        self._live = np.ones(len(pks), dtype=np.bool_)
        self._row_of = np.full(int(pks.max(initial=0)) + 1, -1, dtype=np.int64)
        self._row_of[pks] = np.arange(len(pks))
        self._count = len(pks)
        self._norm_max = _norm_max(vectors)

    def _append(
        self,
        pks: npt.NDArray[np.int64],
        seqs: npt.NDArray[np.int64],
        vectors: Vector,
        ids: npt.NDArray[np.object_],
    ) -> None:
        """Add rows, growing the buffers geometrically so single inserts stay cheap."""
        need = self._count + len(pks)
        if need > len(self._pks):
            capacity = max(need, int(len(self._pks) * 1.5), 1024)
            self._vectors = _grown(self._vectors, capacity)
            self._pks = _grown(self._pks, capacity)
            self._seqs = _grown(self._seqs, capacity)
            self._ids = _grown(self._ids, capacity)
            self._live = _grown(self._live, capacity)
        top = int(pks.max(initial=0)) + 1
        if top > len(self._row_of):
            grown = np.full(max(top, int(len(self._row_of) * 1.5)), -1, dtype=np.int64)
            grown[: len(self._row_of)] = self._row_of
            self._row_of = grown
        rows = np.arange(self._count, need)
        self._vectors[rows] = vectors
        self._pks[rows] = pks
        self._seqs[rows] = seqs
        self._ids[rows] = ids
        self._live[rows] = True
        self._row_of[pks] = rows
        self._count = need
        self._norm_max = max(self._norm_max, _norm_max(vectors))

    def _kill(self, pks: npt.NDArray[np.int64]) -> None:
        rows = self._row_of[pks]
        rows = rows[rows >= 0]
        self._live[rows] = False
        self._row_of[self._pks[rows]] = -1
        self._dead += len(rows)

    def _compact(self) -> None:
        keep = self.live
        pks, seqs, vectors = self.pks[keep], self._seqs[: self._count][keep], self.matrix[keep]
        ids = self._ids[: self._count][keep]
        ann, dimension = self._ann, self.dimension
        assert dimension is not None
        self._reset(dimension)
        self._append(pks.copy(), seqs.copy(), vectors.copy(), ids.copy())
        self._ann = ann

    # -- search --------------------------------------------------------------------------

    def search(self, query: Vector, limit: int, allowed: Mask | None) -> list[tuple[int, float]]:
        """Top ``limit`` (pk, cosine) pairs among live rows (and ``allowed`` ones, if given)."""
        with self._lock:
            rows, scores = self._top(query, limit, allowed)
            return [(int(self._pks[r]), s) for r, s in zip(rows, scores, strict=True)]

    def search_ids(
        self,
        query: Vector,
        limit: int,
        allowed: Mask | None,
        near_memory: bool = False,
        into: dict[str, Vector] | None = None,
    ) -> list[tuple[str, float]]:
        """Like :meth:`search`, with each row's memory id instead of its pk (read under the
        same lock as the ranking, so a concurrent refresh cannot move rows in between);
        ``near_memory``: the query is a stored vector (the ANN index's beam may be narrower);
        ``into``: where copies of the vectors of the rows returned are put, by memory id."""
        with self._lock:
            rows, scores = self._top(query, limit, allowed, near_memory)
            found = [(str(self._ids[r]), s) for r, s in zip(rows, scores, strict=True)]
            if into is not None and rows:
                copies = self.matrix[rows]  # a copy: a refresh overwrites rows in place
                into.update(
                    (str(self._ids[r]), copies[at])
                    for at, r in enumerate(rows)
                    if self._ids[r] is not None
                )
            return found

    def _top(
        self, query: Vector, limit: int, allowed: Mask | None, near_memory: bool = False
    ) -> tuple[list[int], list[float]]:
        """Rows and cosines of the top ``limit``, best first; the caller holds the lock."""
        if self._count == 0 or limit <= 0:
            return [], []
        query = np.asarray(query, dtype=np.float32)
        mask = self.live if allowed is None else (_fit(allowed, self._count) & self.live)
        allowed_count = self.size if allowed is None else int(mask.sum())
        if allowed_count == 0:
            return [], []
        rows = None
        if allowed_count > self.subset_exact_rows and self._ann_ready():
            rows = self._ann_rows(query, limit, mask, allowed_count, near_memory)
        if rows is None:
            rows = self._exact_rows(query, limit, mask, allowed_count)
        scores = cosines(self.matrix[rows], query)
        order = np.lexsort((rows, -scores))[:limit]
        return [int(rows[i]) for i in order], [float(scores[i]) for i in order]

    def _exact_rows(
        self, query: Vector, limit: int, mask: Mask, allowed_count: int
    ) -> npt.NDArray[np.int64]:
        """Rows of the exact top ``limit`` among ``mask``."""
        if allowed_count < self._count // 4:
            candidates = np.flatnonzero(mask)
            best = exact_scan.best_rows(self.matrix[candidates], query, None, limit, self._norm_max)
            return candidates[best]
        return exact_scan.best_rows(self.matrix, query, mask, limit, self._norm_max)

    def _ann_rows(
        self, query: Vector, limit: int, mask: Mask, allowed_count: int, near_memory: bool
    ) -> npt.NDArray[np.int64] | None:
        """Rows the ANN index proposes; None when too few pass the filter (go exact)."""
        assert self._ann is not None
        want = limit * RESCORE_FACTOR
        fetch = int(np.ceil(want * self.size / allowed_count))
        if fetch > MAX_ANN_CANDIDATES:
            return None
        pks = self._ann.candidates(query, min(fetch, self.size), near_memory)
        rows = self._row_of[pks[pks < len(self._row_of)]]
        rows = rows[rows >= 0]
        rows = rows[mask[rows]]
        if len(rows) < min(limit, allowed_count):
            return None
        return rows

    def _ann_ready(self) -> bool:
        """Load or build the ANN index when the store is big enough and usearch is there."""
        if self.size < self.ann_min_rows:
            return False
        if self._ann is not None:
            return True
        if not ann_available():
            if not self._warned:
                log.warning(
                    "this store holds %d vectors; searches use exact scans (slower as it "
                    "grows). Install the ANN extra for an index: %s",
                    self.size,
                    install_hint("ann"),
                )
                self._warned = True
            return False
        assert self.dimension is not None
        rows = MirrorRows(self.pks, self._seqs[: self._count], self.matrix, self.live, self._row_of)
        self._ann = AnnIndex.open(
            self.index_path, self.dimension, rows, self._seq, self.build_threads, self._save_vectors
        )
        return True

    def _save_vectors(self, folder: Path, seq: int) -> None:
        """Write the live rows' vectors beside the ANN index being saved (the index holds
        the live rows; the caller holds the lock)."""
        assert self.dimension is not None
        live = np.flatnonzero(self.live)
        order = live[np.argsort(self.pks[live], kind="stable")]

        def chunks() -> Iterator[vector_file.Rows]:
            for start in range(0, len(order), vector_file.WRITE_CHUNK):
                rows = order[start : start + vector_file.WRITE_CHUNK]
                ids = ["" if i is None else str(i) for i in self._ids[rows]]
                yield self.pks[rows], self._seqs[rows], self.matrix[rows], ids

        vector_file.write(folder, seq, self.dimension, lambda: (len(order), chunks()))


def _norm_max(vectors: Vector) -> float:
    """The largest norm of the rows of ``vectors`` (0 for none)."""
    if not len(vectors):
        return 0.0
    return float(np.sqrt(np.einsum("ij,ij->i", vectors, vectors).max()))


def _fit(mask: Mask, count: int) -> Mask:
    """A mask made before rows were appended (by another thread) leaves the new rows out."""
    if len(mask) >= count:
        return mask[:count]
    return np.concatenate([mask, np.zeros(count - len(mask), dtype=np.bool_)])


def _grown(array: npt.NDArray[_Item], capacity: int) -> npt.NDArray[_Item]:
    out: npt.NDArray[_Item] = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    out[: len(array)] = array
    return out


def listed_pks(
    db: sqlite3.Connection, sql: str, params: Sequence[object] = ()
) -> npt.NDArray[np.int64]:
    """The pks ``sql`` (a query of one pk column) selects, as one array: read as one text
    numpy parses, not a row a pk (a month of the 1M store, 42k rows: 6 ms against 12-16)."""
    (listed,) = db.execute(f"SELECT group_concat(pk, ' ') FROM ({sql})", params).fetchone()
    if not listed:
        return np.zeros(0, dtype=np.int64)
    return np.fromstring(listed, dtype=np.int64, sep=" ")
