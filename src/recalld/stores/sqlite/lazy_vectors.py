"""Vector search from the saved ANN index alone, without loading every vector first.

Why: at 1M vectors the mirror (:mod:`recalld.stores.sqlite.vectors`) reads 1.5 GB of
vectors out of SQLite before a new process can answer its first search (7-17 s on 2 busy
cores, docs/benchmarks-scale.md). With a saved HNSW index that read is not needed: the
index proposes candidate pks, and only those rows' vectors (a few hundred) are read back
to score them exactly, so the scores are the same exact cosines the mirror computes.

:class:`LazyAnn` serves a store that has a saved index and is past ``ann_min_rows``. It
keeps the index in step with the ``vectors`` table the way the mirror does (rows with a
newer ``seq`` re-added; when ``vector_generation`` moved and the index holds more keys than
the table has rows, the pks gone are removed). A search it cannot answer well (too few
candidates pass the filters, or a filter too selective for the index) returns ``None``,
and the store falls back to the mirror for the rest of the process.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.stores.base import Vector
from recalld.stores.sqlite import vector_file
from recalld.stores.sqlite.copy_file import CopyMatrix
from recalld.stores.sqlite.exact_scan import cosines
from recalld.stores.sqlite.vector_file import VectorCopies
from recalld.stores.sqlite.vector_index import (
    MISMATCH,
    NEWEST_CHECKED,
    SPOT_CHECKS,
    SPOT_COSINE,
    AnnIndex,
    _cosine,
    _saved,
    ann_available,
)
from recalld.stores.sqlite.vectors import (
    MAX_ANN_CANDIDATES,
    RESCORE_FACTOR,
    listed_pks,
)

log = logging.getLogger("recalld")

Pks = npt.NDArray[np.int64]
Pool = tuple[Pks, Pks, npt.NDArray[np.float32], dict[int, str]]
"""Rows to re-score: pks, ``seq`` values, vectors, and the memory ids known so far."""
READ_CHUNK = 900
"""Pks per ``IN (...)`` when reading rows back (under SQLite's oldest variable limit)."""
PRESELECT_FACTOR = 4
"""A filtered subset larger than this many times the rows asked for is first ranked by the
index's own (int8) copies of its vectors, and only that many times the rows asked for are
read back from the table and scored exactly. Reading a vector from the table costs about
6 µs, a copy from the index about 1 µs: a month of the 1M store (42k rows) took 200 ms
to read whole."""


PASSING_MARGIN = 1.25
"""Candidates asked for beyond what the share of rows a filter keeps predicts (see
:meth:`LazyAnn.search_passing`)."""


@dataclass(frozen=True)
class Preranked:
    """:meth:`LazyAnn._preselected`'s answer for ``keep``, ``query`` and ``limit``, made
    from the copies file alone without holding the store's vector lock
    (:meth:`LazyAnn.preranked`, on another thread): it stands while the index still reads
    that ``file`` with the same rows ``changed`` since it was written (each change noted
    makes a new array), else the ranking is made again."""

    keep: Pks
    query: npt.NDArray[np.float32]
    limit: int
    file: CopyMatrix
    changed: Pks
    chosen: Pks


class LazyAnn:
    """The saved ANN index of a store, searched with exact re-scoring from the table."""

    def __init__(
        self,
        ann: AnnIndex,
        dimension: int,
        subset_exact_rows: int,
        copies: VectorCopies | None = None,
    ) -> None:
        self.ann = ann
        self.dimension = dimension
        self.subset_exact_rows = subset_exact_rows
        self.copies = copies
        """The index's rows at full precision (:mod:`~recalld.stores.sqlite.vector_file`),
        which the exact re-scoring reads instead of the table; None for an index saved
        without them (by an earlier recalld), whose candidates are read from the table."""
        self._seq = ann.covered_seq
        self._generation = -1
        self._follow(ann)

    @property
    def size(self) -> int:
        return len(self.ann)

    @classmethod
    def open(
        cls,
        db: sqlite3.Connection,
        folder: Path | None,
        subset_exact_rows: int,
        threads: int | None = None,
    ) -> LazyAnn | None:
        """The saved index, checked against the table and caught up; None without one (or
        when it does not belong to this table)."""
        if folder is None or not folder.is_dir() or not _saved(folder) or not ann_available():
            return None
        found = db.execute("SELECT length(vector) FROM vectors LIMIT 1").fetchone()
        if found is None:
            return None
        dimension = int(found[0]) // 4
        started = time.perf_counter()
        ann = AnnIndex._load(folder, dimension, threads, view=True)
        if ann is None:
            return None
        if ann.copy_file is None:  # saved by an earlier recalld: once per store
            ann.write_copies()
        copies = VectorCopies.open(folder, ann.covered_seq, dimension)
        lazy = cls(ann, dimension, subset_exact_rows, copies)
        if not lazy._spot_check(db) or not lazy.catch_up(db):
            return None
        log.info(
            "ANN index opened without loading vectors in %.2f s", time.perf_counter() - started
        )
        return lazy

    def _spot_check(self, db: sqlite3.Connection) -> bool:
        """Stored vectors of random rows the index covers, and of the newest ones it covers
        (:data:`~recalld.stores.sqlite.vector_index.NEWEST_CHECKED`), match the table's."""
        top = db.execute("SELECT MAX(pk) FROM vectors").fetchone()[0] or 0
        guesses = np.random.default_rng(top).integers(1, top + 1, SPOT_CHECKS * 4)
        rows = _read(
            db,
            "SELECT v.pk, v.vector, m.id FROM vectors v JOIN memories m"
            " ON m.pk = v.pk WHERE v.seq <= ? AND v.pk IN ({})",
            [self._seq],
            np.unique(guesses),
        )
        newest = db.execute(
            "SELECT pk, vector FROM vectors WHERE seq <= ? ORDER BY seq DESC LIMIT ?",
            (self._seq, NEWEST_CHECKED),
        ).fetchall()
        for pk, blob in [*newest, *((r[0], r[1]) for r in rows[:SPOT_CHECKS])]:
            stored = self.ann.stored(int(pk))
            if stored is None or _cosine(stored, _vector(blob)) < SPOT_COSINE:
                log.warning(
                    "the saved ANN index does not hold the store's vectors (%s); "
                    "the vectors are loaded instead",
                    MISMATCH,
                )
                return False
        if self.copies is not None and rows:
            checked = rows[:SPOT_CHECKS]
            pks = np.array([r[0] for r in checked], np.int64)
            found, _, vectors, ids = self.copies.lookup_ids(pks)
            table = np.vstack([_vector(r[1]) for r in checked])
            same_ids = ids == [str(r[2]) for r in checked]
            if not found.all() or not np.array_equal(vectors, table) or not same_ids:
                log.warning(
                    "the ANN index's vectors file disagrees with the table; reading"
                    " the candidates' vectors from the table instead"
                )
                self.copies = None
                self.ann.save_vectors = None
        return True

    def _follow(self, ann: AnnIndex) -> None:
        """Have ``ann`` write the vectors file whenever it is saved (when they are held)."""
        ann.save_vectors = None if self.copies is None else self._save_vectors

    def _save_vectors(self, folder: Path, seq: int) -> None:
        """Write the held vectors as the file of the index being saved, and map it (the
        rows changed since the last file are then no longer kept in memory)."""
        copies = self.copies
        if copies is None:
            return
        vector_file.write(folder, seq, self.dimension, copies.rows)
        self.copies = VectorCopies.open(folder, seq, self.dimension) or copies

    def _apply(
        self,
        dropped: Pks,
        pks: Pks,
        seqs: Pks,
        vectors: npt.NDArray[np.float32],
        ids: list[str | None],
        seq: int,
    ) -> None:
        """One change to the index and its vectors alike (the vectors first: saving the
        index writes them). A vector without a memory row (``None`` id) is left to the table."""
        if self.copies is not None:
            held = np.array([i is not None for i in ids], dtype=np.bool_)
            self.copies.apply(
                np.concatenate([dropped, pks[~held]]),
                pks[held],
                seqs[held],
                vectors[held],
                [str(i) for i in ids if i is not None],
            )
        self.ann.apply(dropped, pks, vectors, seq)

    def catch_up(self, db: sqlite3.Connection) -> bool:
        """Apply the table's changes since the index's ``seq``; False if the two disagree in
        a way only a rebuild fixes (the caller then uses the mirror)."""
        generation = int(
            db.execute("SELECT value FROM meta WHERE key = 'vector_generation'").fetchone()[0]
        )
        newest = db.execute("SELECT MAX(seq) FROM vectors").fetchone()[0] or 0
        if newest == self._seq and generation == self._generation:
            return True
        if self.ann.is_view and not self._writable(db, newest, generation):
            return False
        fresh = db.execute(
            "SELECT v.pk, v.vector, v.seq, m.id FROM vectors v LEFT JOIN memories m"
            " ON m.pk = v.pk WHERE v.seq > ? AND v.seq <= ? ORDER BY v.seq",
            (self._seq, newest),
        ).fetchall()
        none = np.zeros(0, dtype=np.int64)
        if fresh:
            pks = np.array([r[0] for r in fresh], dtype=np.int64)
            seqs = np.array([r[2] for r in fresh], dtype=np.int64)
            vectors = np.vstack([_vector(r[1]) for r in fresh])
            self._apply(none, pks, seqs, vectors, [r[3] for r in fresh], newest)
        if generation != self._generation:
            total = db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
            if self.size > total:  # rows deleted since: find them among the keys
                current = listed_pks(db, "SELECT pk FROM vectors")
                keys = self.ann.keys()
                self._apply(
                    keys[~np.isin(keys, current)],
                    none,
                    none,
                    np.zeros((0, self.dimension), np.float32),
                    [],
                    newest,
                )
            if self.size != total:
                return False
        if self.ann.stale:
            return False
        self._seq, self._generation = newest, generation
        return True

    def _writable(self, db: sqlite3.Connection, newest: int, generation: int) -> bool:
        """Swap the mapped file for an in-memory copy when the table changed since it was
        saved (reading it costs about 2.6 s at 1M; only a changed store pays it)."""
        total = db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
        if newest == self._seq and total == self.size:
            self._generation = generation  # only the counter moved (rows added, then gone)
            return True
        copy = self.ann.reloaded(self.dimension)
        if copy is None:
            return False
        self.ann = copy
        self._follow(copy)
        return True

    def search(
        self,
        db: sqlite3.Connection,
        query: Vector,
        limit: int,
        hidden: Pks | None = None,
        keep: Pks | None = None,
        near_memory: bool = False,
        into: dict[str, Vector] | None = None,
        preranked: Preranked | None = None,
    ) -> list[tuple[str, float]] | None:
        """Top ``limit`` (memory id, exact cosine), best first, among rows not ``hidden``
        (or only ``keep`` ones); None when the mirror should answer instead.
        ``near_memory``: the query is a stored vector (a narrower beam does). ``into``:
        where the vectors of the memories returned are put, by id (see :meth:`_best`).
        ``preranked``: ``keep`` ranked by its copies already (:meth:`preranked`)."""
        query = np.asarray(query, dtype=np.float32)
        if limit <= 0:
            return []
        if keep is not None and len(keep) <= self.subset_exact_rows:
            return self._exact_subset(db, keep, query, limit, into, preranked)
        allowed = self._allowed_count(hidden, keep)
        if allowed == 0:
            return []
        if allowed <= self.subset_exact_rows:
            if keep is None:
                return None
            return self._exact_subset(db, keep, query, limit, into, preranked)
        fetch = math.ceil(limit * RESCORE_FACTOR * self.size / allowed)
        if fetch > MAX_ANN_CANDIDATES:
            return None
        pks = self.ann.candidates(query, min(fetch, self.size), near_memory)
        if hidden is not None and len(hidden):
            pks = pks[~np.isin(pks, hidden)]
        if keep is not None:
            pks = pks[np.isin(pks, keep)]
        if self.copies is not None:
            pool = self._pool(db, pks)
            if len(pool[0]) < min(limit, allowed):
                return None
            return self._best(db, pool, query, limit, into)
        rows = _read(db, _ROWS, [], pks)
        if len(rows) < min(limit, allowed):
            return None
        return self._top(rows, query, limit)

    def vectors_for(
        self,
        db: sqlite3.Connection,
        ids: Sequence[str],
        wall: str,
        params: Sequence[object],
        tenant: str,
        known: Mapping[str, int] | None = None,
    ) -> tuple[dict[str, Vector], list[str]]:
        """The vectors of the memories ``ids`` (within ``wall``; the ``tenant``'s own memory
        first where a shared namespace holds the same id) the vectors file holds, and the
        ids it does not (read from the table by the caller). The ids are turned into pks by
        ``known`` (the pks the search's readers found them at, inside ``wall``), else on
        the ``(namespace, id)`` index alone, no memory row read (3-4 us an id at 100k)."""
        if self.copies is None:
            return {}, list(ids)
        pk_of: dict[str, int] = {}
        if known:
            pk_of = {i: known[i] for i in ids if i in known}
        unknown = [i for i in ids if i not in pk_of] if pk_of else list(ids)
        for start in range(0, len(unknown), READ_CHUNK):
            chunk = unknown[start : start + READ_CHUNK]
            marks = ",".join("?" * len(chunk))
            pk_of.update(
                db.execute(
                    f"SELECT m.id, m.pk FROM memories m WHERE m.id IN ({marks}) AND {wall}"
                    " ORDER BY m.namespace = ?",
                    [*chunk, *params, tenant],
                ).fetchall()
            )
        named = list(pk_of)
        found, _, vectors = self.copies.lookup(np.array([pk_of[i] for i in named], np.int64))
        held = {named[i]: vectors[i] for i in np.flatnonzero(found).tolist()}
        return held, [i for i in ids if i not in held]

    def passing_rows(self, limit: int) -> int:
        """The rows a filter must keep for :meth:`search_passing` to find ``limit`` of them
        among the index's candidates: with a share s of the rows kept, ``limit`` x
        :data:`RESCORE_FACTOR` pass among about that many over s candidates, which must stay
        within :data:`MAX_ANN_CANDIDATES`."""
        share = PASSING_MARGIN * limit * RESCORE_FACTOR / MAX_ANN_CANDIDATES
        return math.ceil(share * self.size)

    def search_passing(
        self,
        db: sqlite3.Connection,
        query: Vector,
        limit: int,
        where: str,
        params: list[object],
        into: dict[str, Vector] | None = None,
    ) -> list[tuple[str, float]] | None:
        """Top ``limit`` (memory id, exact cosine), best first, among the rows that pass
        ``where`` (over ``memories m``), the filter applied to the index's candidates alone,
        as their vectors are read, instead of listing every row it keeps: a time window over
        a year of a 1M store keeps 500k rows, which took a second to list. None when too few
        candidates pass for a wider search to find enough (a narrow filter, whose rows the
        caller lists); ``into`` as in :meth:`search`."""
        query = np.asarray(query, dtype=np.float32)
        copies = self.copies
        sql = (_ROWS_PASSING if copies is None else _IDS_PASSING).format(where=where)
        want = limit * RESCORE_FACTOR
        fetch = min(want * 2, self.size)
        verdicts: dict[int, Any] = {}
        """Each candidate read: its row when it passed the filter, else None (the wider
        search's candidates are mostly the narrower one's: only the others are read)."""
        for _ in range(2):
            rows = _read_once(db, sql, params, self.ann.candidates(query, fetch), verdicts)
            if len(rows) >= want or fetch >= self.size:
                if copies is None:
                    return self._top(rows, query, limit)
                ids = {int(pk): str(memory_id) for pk, memory_id in rows}
                pks = np.fromiter(ids, dtype=np.int64, count=len(ids))
                return self._best(db, self._pool(db, pks, ids), query, limit, into)
            # The share that passed says how many candidates would give enough.
            needed = math.ceil(PASSING_MARGIN * want * fetch / max(len(rows), 1))
            if needed > MAX_ANN_CANDIDATES:
                return None
            fetch = min(needed, self.size)
        return None

    def _exact_subset(
        self,
        db: sqlite3.Connection,
        keep: Pks,
        query: Vector,
        limit: int,
        into: dict[str, Vector] | None = None,
        preranked: Preranked | None = None,
    ) -> list[tuple[str, float]]:
        """Exact search among the ``keep`` rows (the caller knows they are few enough)."""
        pks = self._preselected(keep, query, limit, preranked)
        if self.copies is not None:
            return self._best(db, self._pool(db, pks), query, limit, into)
        return self._top(_read(db, _ROWS, [], pks), query, limit)

    def preranked(self, keep: Pks, query: Vector, limit: int) -> Preranked | None:
        """:meth:`_preselected`'s answer made from the copies file alone, without the
        store's vector lock (the file is mapped read-only; the rows changed since it are
        read once): when ``keep`` is large enough to be ranked and the file holds every
        row of it as the index has it; else None. Used only while it stands
        (:class:`Preranked`)."""
        pool = PRESELECT_FACTOR * limit
        file = self.ann.copy_file
        if file is None or len(keep) <= pool or not len(file):
            return None
        changed = file.changed
        held, rows = file.rows_of(keep)
        if not held.all():
            return None
        query = np.asarray(query, dtype=np.float32)
        scores = file.cosines(rows, query)
        chosen = keep[np.argpartition(-scores, pool)[:pool]]
        return Preranked(keep, query, limit, file, changed, chosen)

    def _preselected(
        self, keep: Pks, query: Vector, limit: int, preranked: Preranked | None = None
    ) -> Pks:
        """The rows of ``keep`` worth scoring exactly for the top ``limit``: all of a small
        set; of a large one, the :data:`PRESELECT_FACTOR` x ``limit`` nearest by the
        index's copies (the same copies its graph search ranks by); ``preranked`` where it
        stands (the same answer, made earlier)."""
        pool = PRESELECT_FACTOR * limit
        if len(keep) <= pool:
            return keep
        if (
            preranked is not None
            and preranked.keep is keep
            and preranked.limit == limit
            and preranked.file is self.ann.copy_file
            and preranked.changed is preranked.file.changed
            and np.array_equal(preranked.query, query)
        ):
            return preranked.chosen
        found, scores = self.ann.copy_scores(keep, np.asarray(query, np.float32))
        present = np.flatnonzero(found)
        if len(present) <= pool:
            return keep
        # A row the index has no copy of (written since it caught up, or without a vector)
        # is read back as it is: the table decides.
        uncopied = keep[~found]
        best = np.argpartition(-scores, pool)[:pool]
        return np.concatenate([keep[present[best]], uncopied])

    def _allowed_count(self, hidden: Pks | None, keep: Pks | None) -> int:
        """Rows with a vector a search may return (as the mirror counts its mask)."""
        if keep is not None:
            return int(np.count_nonzero(self._contains(keep)))
        if hidden is None or not len(hidden):
            return self.size
        return self.size - int(np.count_nonzero(self._contains(hidden)))

    def _contains(self, pks: Pks) -> npt.NDArray[np.bool_]:
        if not len(pks):
            return np.zeros(0, dtype=np.bool_)
        return self.ann.contains(np.unique(pks))

    def _pool(self, db: sqlite3.Connection, pks: Pks, ids: dict[int, str] | None = None) -> Pool:
        """The rows of ``pks`` that have a vector, with their ``seq`` and vector: from the
        held copies, and for a row they lack (written since the index caught up, or a
        filtered row the index never held) from the table, which decides. ``ids``: memory
        ids already known, by pk."""
        assert self.copies is not None
        found, seqs, vectors = self.copies.lookup(pks)
        known = {} if ids is None else ids
        if found.all():
            return pks, seqs, vectors, known
        rows = _read(db, _ROWS, [], pks[~found])
        known = {**known, **{int(r[0]): str(r[3]) for r in rows}}
        if not rows:
            return pks[found], seqs[found], vectors[found], known
        read = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
        return (
            np.concatenate([pks[found], np.array([r[0] for r in rows], np.int64)]),
            np.concatenate([seqs[found], np.array([r[1] for r in rows], np.int64)]),
            np.concatenate([vectors[found], read.reshape(len(rows), -1)]),
            known,
        )

    def _best(
        self,
        db: sqlite3.Connection,
        pool: Pool,
        query: Vector,
        limit: int,
        into: dict[str, Vector] | None = None,
    ) -> list[tuple[str, float]]:
        """The top ``limit`` of a :meth:`_pool` by exact cosine, best first, equal ones in
        ``seq`` order (as :meth:`_top`); the memory ids of the rows kept are looked up then
        (in the vectors file, else the table), and a row whose memory is gone since (deleted
        by another process) gives way to the next. ``into``: where the vectors scored of
        the rows returned are put, by memory id (the pipeline reads them later)."""
        pks, seqs, vectors, ids = pool
        if not len(pks):
            return []
        scores = cosines(vectors, query)
        order = np.lexsort((seqs, -scores))
        out: list[tuple[str, float]] = []
        start = 0
        while len(out) < limit and start < len(order):
            chosen = order[start : start + limit - len(out)]
            start += len(chosen)
            kept = pks[chosen].tolist()
            unknown = [pk for pk in kept if not ids.get(pk)]
            if unknown and self.copies is not None:
                held = self.copies.ids_of(np.array(unknown, dtype=np.int64))
                ids = {**ids, **{pk: name for pk, name in zip(unknown, held, strict=True)}}
                unknown = [pk for pk in unknown if not ids[pk]]
            if unknown:
                read = _read(db, _IDS, [], np.array(unknown, dtype=np.int64))
                ids = {**ids, **{int(pk): str(memory_id) for pk, memory_id in read}}
            names = [ids.get(pk) for pk in kept]
            scored = scores[chosen].tolist()
            out += [(name, score) for name, score in zip(names, scored, strict=True) if name]
            if into is not None:  # views of the pool's rows, no copy
                into.update(
                    (name, vectors[at])
                    for name, at in zip(names, chosen.tolist(), strict=True)
                    if name
                )
        return out

    def _top(self, rows: list[Any], query: Vector, limit: int) -> list[tuple[str, float]]:
        """Exact cosines of the rows, best first; equal ones in ``seq`` order, as the
        mirror (loaded in ``seq`` order) breaks them."""
        if not rows:
            return []
        seqs = np.array([r[1] for r in rows], dtype=np.int64)
        matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
        scores = cosines(matrix.reshape(len(rows), -1), query)
        order = np.lexsort((seqs, -scores))[:limit]
        return [(str(rows[i][3]), float(scores[i])) for i in order]


_ROWS = (
    "SELECT v.pk, v.seq, v.vector, m.id FROM vectors v JOIN memories m ON m.pk = v.pk"
    " WHERE v.pk IN ({})"
)
_ROWS_PASSING = (
    "SELECT v.pk, v.seq, v.vector, m.id FROM vectors v JOIN memories m NOT INDEXED"
    " ON m.pk = v.pk WHERE {where} AND v.pk IN ({{}})"
)
""":data:`_ROWS` of the rows passing a filter (its parameters first); ``NOT INDEXED``: read by
pk, never by scanning an index of the filter's columns."""
_IDS = "SELECT pk, id FROM memories WHERE pk IN ({})"
"""The memory ids of the rows re-scored from the held vectors."""
_IDS_PASSING = "SELECT m.pk, m.id FROM memories m NOT INDEXED WHERE {where} AND m.pk IN ({{}})"
""":data:`_IDS` of the rows passing a filter, as :data:`_ROWS_PASSING`."""


def _read(db: sqlite3.Connection, sql: str, params: list[object], pks: Pks) -> list[Any]:
    """Rows of ``sql`` (whose ``IN ({})`` takes the pks) for every pk, in chunks."""
    out: list[Any] = []
    values = [int(p) for p in pks]
    for start in range(0, len(values), READ_CHUNK):
        chunk = values[start : start + READ_CHUNK]
        out += db.execute(sql.format(", ".join("?" * len(chunk))), [*params, *chunk]).fetchall()
    return out


def _read_once(
    db: sqlite3.Connection, sql: str, params: list[object], pks: Pks, verdicts: dict[int, Any]
) -> list[Any]:
    """:func:`_read`'s rows of ``pks``, in its order, reading only the pks ``verdicts`` does
    not hold yet (then noted there: the row, or None for a pk the filter turned away)."""
    keys = [int(p) for p in pks]
    fresh = [k for k in keys if k not in verdicts]
    verdicts.update(dict.fromkeys(fresh))
    verdicts.update((int(row[0]), row) for row in _read(db, sql, params, np.array(fresh)))
    # _read's order: chunk by chunk in the pks' order, each chunk's rows by pk (SQLite
    # answers ``pk IN (...)`` in the order of the pk).
    out: list[Any] = []
    for start in range(0, len(keys), READ_CHUNK):
        chunk = sorted(keys[start : start + READ_CHUNK])
        out += [verdicts[k] for k in chunk if verdicts[k] is not None]
    return out


def _vector(blob: bytes) -> npt.NDArray[np.float32]:
    return np.frombuffer(blob, dtype=np.float32)
