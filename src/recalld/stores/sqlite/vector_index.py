"""The optional ANN index behind the vector mirror: usearch HNSW, keyed by pk, persisted.

The index only proposes candidates; the mirror re-scores them exactly. It is saved as
``<folder>/<seq>.usearch`` where ``seq`` is the last vector row it covers, written under a
temporary name and renamed, so a reader never sees a half-written file. Opening it
reconciles it with the mirror (rows newer than ``seq`` re-added, pks gone removed) and
spot-checks stored vectors (random rows and the newest it covers), so a file left by another
process or an older state is repaired, and one that belongs to another database, or was saved
before the store was restored from a backup, is rebuilt.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.private_files import FILE_MODE, private_folder
from recalld.stores.sqlite import ann_beam, ann_memory, copy_file, vector_file
from recalld.stores.sqlite.copy_file import CopyMatrix

log = logging.getLogger("recalld")

PRODUCT_NORM_SPREAD = 1.05
"""A view whose int8 copies all have norms within this ratio of each other walks its graph
by their inner product with the unit query instead of their cosine (:meth:`AnnIndex.
candidates`): the order is the cosine's within that spread, and the exact re-scoring gives
the final order either way, while usearch's int8 cosine computes three products a step,
the inner product one. At 1M (norms 118.1-120.9, spread 1.024; 200 questions, huge
pages): walks of 7.5 against 9.5 ms a search at a beam of 2,048, 10.4 against 13.8 at
3,072, the same default top 10s (docs/design/search-cpu.md, "The graph walk at 1M").
usearch normalizes a vector before its int8 copy in a cosine index (norms of 118-126,
whatever the vector's), so this holds for such an index; the check guards the others."""
QUANTIZATION = "i8"
"""Vectors inside the index are int8 (a quarter of float32); exact re-scoring makes up for
the lost precision (docs/benchmarks.md)."""
STALE_FRACTION = 0.25
"""Removed entries still hold graph slots; past this fraction of the index it is rebuilt."""
SAVE_FRACTION = 0.02
"""Unsaved changes past this fraction of the index trigger a save (small deltas are cheap
to replay from the table when the next process opens the index)."""
SPOT_CHECKS = 32
"""Stored vectors compared with the table's when a saved index is opened."""
NEWEST_CHECKED = SPOT_CHECKS
"""Besides the random rows, the rows the index covers with the highest ``seq`` are checked:
a store restored from a backup numbers its new vectors again from where the backup stopped,
so its newest rows (other memories, often at the same pks) look covered by an index saved
after the backup; they are where such an index is wrong."""
MISMATCH = "another store's, or the store was restored from a backup since it was saved"
SPOT_COSINE = 0.98
"""An int8 copy of a vector keeps cosine > 0.99 to it; lower means another database."""
BUILD_CHUNK = 65_536
"""Rows handed to usearch per ``add`` call, so building never copies the whole matrix."""

Ids = npt.NDArray[np.int64]
Matrix = npt.NDArray[np.float32]
SaveVectors = Callable[[Path, int], None]


@dataclass(frozen=True)
class MirrorRows:
    """The mirror's rows as the index sees them (``row_of`` maps live pks to rows, else -1)."""

    pks: Ids
    seqs: Ids
    matrix: Matrix
    live: npt.NDArray[np.bool_]
    row_of: Ids


def ann_available() -> bool:
    """Whether the optional ``usearch`` package (extra ``recalld[ann]``) is installed."""
    return importlib.util.find_spec("usearch") is not None


class AnnIndex:
    """A usearch index over the mirror's live rows; see :meth:`open`."""

    def __init__(
        self,
        index: Any,
        folder: Path | None,
        covered_seq: int,
        threads: int | None = None,
        built_with: int = ann_beam.EXPANSION_ADD,
    ) -> None:
        self._index = index
        self.built_with = built_with
        """The build beam of most of the graph (:data:`ann_beam.EXPANSION_ADD`, or the
        smaller one of an older saved file, which keeps it in its name)."""
        self._threads = threads or os.cpu_count() or 1
        self._folder = folder
        self.covered_seq = covered_seq
        self._removed = 0
        self._unsaved = 0
        self.is_view = False
        """A memory-mapped saved file: it answers searches but cannot be changed."""
        self.view_of: ann_memory.SavedFile | None = None
        """The saved file a view maps, as it was then."""
        self.huge_copy: ann_memory.HugeCopy | None = None
        """The saved file's bytes a view reads once they are copied into memory backed by
        huge pages (:mod:`recalld.stores.sqlite.ann_memory`); None while it maps the file."""
        self.copying: threading.Thread | None = None
        """The thread making :attr:`huge_copy`, once the view has walked
        ``ann_memory.WALKS_BEFORE_COPY`` times."""
        self._walks = 0
        self.by_product = False
        """The walk ranks by inner product (see :data:`PRODUCT_NORM_SPREAD`), set for a
        view whose copies' norms allow it."""
        self._last: tuple[bytes, int, Ids] | None = None
        """The last search's query, beam and whole answer (see :meth:`candidates`)."""
        self.save_vectors: SaveVectors | None = None
        """Writes the full-precision vectors of the index's rows beside it as it is saved
        (:mod:`recalld.stores.sqlite.vector_file`), given the folder and the ``seq``; set by
        the owner that holds them."""
        self.copy_file: CopyMatrix | None = None
        """Its copies as saved with it, mapped (:mod:`recalld.stores.sqlite.copy_file`):
        what :meth:`copy_rows` reads; None without the file."""

    @classmethod
    def open(
        cls,
        folder: Path | None,
        dimension: int,
        rows: MirrorRows,
        seq: int,
        threads: int | None = None,
        save_vectors: SaveVectors | None = None,
    ) -> AnnIndex:
        """The saved index reconciled with the mirror's rows, or a new one built from them;
        ``save_vectors`` (see :attr:`save_vectors`) writes their vectors as it is saved."""
        saved = cls._load(folder, dimension, threads)
        if saved is not None and saved._reconcile(rows):
            saved.save_vectors = save_vectors
            without = saved._folder is not None and not vector_file.usable(
                saved._folder, saved.covered_seq, dimension
            )
            saved.covered_seq = seq
            if without and save_vectors is not None:
                saved.save()  # saved by an earlier recalld: the vectors file comes with it
            else:
                saved._save_if_due()
            return saved
        started = time.perf_counter()
        built = cls(_new_index(dimension), folder, seq, threads)
        built.save_vectors = save_vectors
        live = np.flatnonzero(rows.live)
        # A warning, so a long first search is explained (minutes at 1M vectors on 2 cores).
        log.warning("building the ANN index over %d vectors (once; it is saved)", len(live))
        for start in range(0, len(live), BUILD_CHUNK):
            chunk = live[start : start + BUILD_CHUNK]
            built._index.add(rows.pks[chunk], rows.matrix[chunk], threads=built._threads)
        log.info("ANN index built in %.1f s", time.perf_counter() - started)
        built._unsaved = len(live)
        built.save()
        return built

    @classmethod
    def _load(
        cls,
        folder: Path | None,
        dimension: int,
        threads: int | None = None,
        view: bool = False,
        seq: int | None = None,
    ) -> AnnIndex | None:
        """The newest saved index (or the one covering ``seq``); ``view`` maps the file
        instead of reading it (instant at 1M, read-only: :attr:`is_view`; copied into huge
        pages later, see :meth:`candidates`)."""
        if folder is None or not folder.is_dir():
            return None
        Index = _usearch_index()

        for covered, built_with, path in sorted(_saved(folder), reverse=True):
            if seq is not None and covered != seq:
                continue
            mapped = ann_memory.SavedFile.of(path) if view else None
            try:
                index = Index.restore(str(path), view=view)
            except (OSError, RuntimeError, ValueError):
                continue  # deleted by a concurrent save, or unreadable: try the next one
            if index is not None and index.ndim == dimension:
                if not view:  # usearch does not keep it in the file: rows added later
                    index.expansion_add = ann_beam.EXPANSION_ADD
                loaded = cls(index, folder, covered, threads, built_with)
                loaded.is_view = view
                loaded.view_of = mapped if mapped == ann_memory.SavedFile.of(path) else None
                loaded.copy_file = loaded._saved_copies()
                if view and loaded._norms_even():
                    index.metric = "ip"
                    loaded.by_product = True
                return loaded
        return None

    def _norms_even(self) -> bool:
        """Whether the copies file holds every row the index does, with norms within
        :data:`PRODUCT_NORM_SPREAD` of each other."""
        saved = self.copy_file
        if saved is None or not len(saved) or len(saved) != len(self._index):
            return False
        low, high = saved.norm_range()
        return low > 0 and high <= PRODUCT_NORM_SPREAD * low

    def _reconcile(self, rows: MirrorRows) -> bool:
        """Bring a loaded index in step with the rows; False if it belongs elsewhere.

        Uses the mirror's pk -> row map, so no set operation over all keys is needed
        (hash-based ``setdiff1d`` over 1M keys cost seconds).
        """
        live = np.flatnonzero(rows.live)
        old = live[rows.seqs[live] <= self.covered_seq]
        if len(old):
            sample = np.random.default_rng(len(old)).choice(old, min(SPOT_CHECKS, len(old)))
            newest = old[np.argsort(rows.seqs[old])[-NEWEST_CHECKED:]]
            for row in np.concatenate([newest, sample]):
                stored = self.stored(int(rows.pks[row]))
                if stored is None or _cosine(stored, rows.matrix[row]) < SPOT_COSINE:
                    log.warning(
                        "the saved ANN index in %s does not hold the store's vectors "
                        "(%s); it is built again",
                        self._folder,
                        MISMATCH,
                    )
                    return False
        keys = self.keys()
        key_rows = np.full(len(keys), -1, dtype=np.int64)
        known = (keys >= 0) & (keys < len(rows.row_of))
        key_rows[known] = rows.row_of[keys[known]]
        indexed = np.zeros(len(rows.pks), dtype=np.bool_)
        indexed[key_rows[key_rows >= 0]] = True
        redo = live[(rows.seqs[live] > self.covered_seq) | ~indexed[live]]
        self.apply(keys[key_rows < 0], rows.pks[redo], rows.matrix[redo], self.covered_seq)
        return True

    def apply(self, dropped: Ids, pks: Ids, vectors: Matrix, seq: int) -> None:
        """Remove ``dropped``, (re)insert ``pks`` with ``vectors``; now covers up to ``seq``."""
        self._last = None
        stale = np.union1d(dropped, pks)
        if self.copy_file is not None:
            self.copy_file.note(stale)
        if len(stale):
            present = stale[self.contains(stale)]
            self._removed += len(present)
            if self.stale:
                return  # a rebuild is due: patching it first would be wasted work
            if len(present):
                self._index.remove(present)
        if len(pks):
            self._index.add(pks, vectors, threads=self._threads)
        self.covered_seq = seq
        self._unsaved += len(stale)
        self._save_if_due()

    def __len__(self) -> int:
        return len(self._index)

    def keys(self) -> Ids:
        """The pks the index holds."""
        return np.asarray(self._index.keys, dtype=np.int64)

    def contains(self, pks: Ids) -> npt.NDArray[np.bool_]:
        """Whether each of ``pks`` (unique) is in the index."""
        return np.asarray(self._index.contains(pks), dtype=np.bool_)

    def stored(self, pk: int) -> Matrix | None:
        """The index's copy of row ``pk``'s vector as float32, or None."""
        found = self._index.get(int(pk), dtype=np.float32)
        return None if found is None else np.asarray(found, dtype=np.float32)

    def copies(self, pks: Ids) -> list[Any]:
        """The index's own (int8) copies of the rows' vectors, None for a row it lacks.

        Read through usearch's compiled lookup where it has one: its public ``get`` wraps
        every copy again in Python (a month of the 1M store, 42k rows: 47 against 32 ms)."""
        keys = pks.astype(np.uint64)
        lookup = getattr(getattr(self._index, "_compiled", None), "get_many", None)
        if lookup is None:
            return list(self._index.get(keys))
        return list(lookup(keys, self._index.dtype))

    def copy_rows(self, pks: Ids) -> tuple[npt.NDArray[np.bool_], npt.NDArray[Any], Matrix]:
        """Whether the index holds each of ``pks``; the (int8) copies of those it holds, in
        the order of ``pks``, as one matrix, and their norms (``copy_file.copy_norms``):
        from the saved copies file where it holds the row as the index has it now, else
        from the index itself (:meth:`copies`)."""
        saved = self.copy_file
        if saved is None or not len(saved):
            read = self.copies(pks)
            found = np.array([row is not None for row in read], dtype=np.bool_)
            matrix = _stacked([row for row in read if row is not None])
            return found, matrix, copy_file.copy_norms(matrix)
        held, rows = saved.rows_of(pks)
        if held.all():
            return (held, *saved.gather(rows))  # the usual case: one gather
        found, fresh_at, fresh = self._changed_copies(pks, held)
        place = np.cumsum(found) - 1
        matrix, norms = saved.empty(int(np.count_nonzero(found)))
        matrix[place[held]], norms[place[held]] = saved.gather(rows[held])
        if len(fresh_at):
            matrix[place[fresh_at]] = fresh
            norms[place[fresh_at]] = copy_file.copy_norms(fresh)
        return found, matrix, norms

    def copy_scores(self, pks: Ids, query: Matrix) -> tuple[npt.NDArray[np.bool_], Matrix]:
        """Whether the index holds each of ``pks``, and the float32 ``query``'s cosine with
        the copies of those it holds, in the order of ``pks``: the scores
        ``copy_file.copy_cosines`` gives :meth:`copy_rows`' matrix, to the bit, the file's
        rows scored as they are gathered (``CopyMatrix.cosines``), never all in one matrix
        (a month of the 1M store, 42k rows: 7 against 13 ms)."""
        saved = self.copy_file
        if saved is None or not len(saved):
            found, matrix, norms = self.copy_rows(pks)
            return found, copy_file.copy_cosines(matrix, query, norms)
        held, rows = saved.rows_of(pks)
        if held.all():
            return held, saved.cosines(rows, query)  # the usual case
        found, fresh_at, fresh = self._changed_copies(pks, held)
        scores = np.empty(len(pks), dtype=np.float32)
        scores[held] = saved.cosines(rows[held], query)
        if len(fresh_at):
            norms = copy_file.copy_norms(fresh)
            scores[fresh_at] = copy_file.copy_cosines(fresh, query, norms)
        return found, scores[found]

    def _changed_copies(
        self, pks: Ids, held: npt.NDArray[np.bool_]
    ) -> tuple[npt.NDArray[np.bool_], Ids, npt.NDArray[Any]]:
        """For rows of ``pks`` the copies file does not hold as the index has them now (not
        ``held``): whether the index holds each of ``pks``, where among them those it
        holds and the file does not are, and their copies (asked of the index)."""
        asked = np.flatnonzero(~held)
        read = self.copies(pks[asked])
        got = np.array([row is not None for row in read], dtype=np.bool_)
        found = held.copy()
        found[asked[got]] = True
        return found, asked[got], _stacked([row for row in read if row is not None])

    def write_copies(self) -> None:
        """Write the copies file of the index as it is (the file saved as ``covered_seq``,
        which the caller vouches for) and map it; a read-only folder keeps none."""
        if self._folder is None:
            return
        try:
            written = self._copies_written(self._folder)
        except OSError as exc:
            log.warning("cannot save the ANN index's copies in %s: %s", self._folder, exc)
            return
        self.copy_file = self._saved_copies()
        if written is not None and not any(
            s == self.covered_seq for s, _, _ in _saved(self._folder)
        ):
            written.unlink(missing_ok=True)  # another process saved a newer index meanwhile

    def _copies_written(self, folder: Path) -> Path | None:
        """The copies file of the index as it is now, written under ``covered_seq``; None
        when they are not one matrix (nothing written: :meth:`copy_rows` asks the index)."""
        try:
            return copy_file.write(folder, self.covered_seq, np.sort(self.keys()), self.copies)
        except ValueError as exc:
            log.warning("the ANN index's copies were not saved in %s: %s", folder, exc)
            return None

    def _saved_copies(self) -> CopyMatrix | None:
        """The copies file saved for ``covered_seq``, if it holds this index's copies (rows
        spread over it compared, as the vectors of a saved index are)."""
        found = CopyMatrix.open(self._folder, self.covered_seq)
        if found is None or not len(found):
            return found
        pks, rows, norms = found.sample(SPOT_CHECKS)
        mine = self.copies(pks)
        pairs = zip(mine, rows, strict=True)
        same = all(c is not None and c.tobytes() == r.tobytes() for c, r in pairs)
        if not same or not np.array_equal(copy_file.copy_norms(rows), norms):
            log.warning("the ANN index's copies file disagrees with the index; not used")
            return None
        return found

    def reloaded(self, dimension: int) -> AnnIndex | None:
        """The saved file this index was loaded from, read into memory (so it can change)."""
        return AnnIndex._load(self._folder, dimension, self._threads, seq=self.covered_seq)

    @property
    def stale(self) -> bool:
        """True when removals have piled up enough that a rebuild pays."""
        return self._removed > STALE_FRACTION * max(len(self), 1)

    def candidates(self, query: Matrix, count: int, near_memory: bool = False) -> Ids:
        """Keys (pks) of about ``count`` nearest neighbours, best first (``near_memory``:
        the query is a stored vector, see :data:`ann_beam.NEAR_MEMORY_EXPANSION`).

        The graph is walked with a beam of candidates, and the best ``count`` of them are
        the answer, so one walk answers every count up to the beam's width: the whole beam
        is kept, and the same query asked again with the same beam (a search's nearest
        memories, then those inside its time window, both at the widest beam in a large
        index) takes its first ``count`` instead of walking the graph again.

        A view that has walked ``ann_memory.WALKS_BEFORE_COPY`` times starts copying its
        file into huge pages in the background (:meth:`_use_copy`), so a process that
        searches once never reads the whole file."""
        beam = ann_beam.beam_width(count, len(self), self.built_with)
        if near_memory:
            beam = max(count, min(beam, ann_beam.NEAR_MEMORY_EXPANSION))
        asked = np.ascontiguousarray(query, dtype=np.float32).tobytes()
        last = self._last
        if last is not None and last[0] == asked and last[1] == beam and len(last[2]) >= count:
            return last[2][:count]
        index = self._index  # one graph for the whole walk, should :meth:`_use_copy` swap it
        index.expansion_search = beam
        if self.by_product:  # a unit query: the products are the copies' cosines, scaled
            query = query / max(float(np.linalg.norm(query)), 1e-12)
        keys = np.asarray(index.search(query, beam).keys, dtype=np.int64)
        self._last = (asked, beam, keys)
        self._walks += 1
        if self._walks == ann_memory.WALKS_BEFORE_COPY and self.view_of is not None:
            self.copying = ann_memory.copy_in_background(self.view_of, self._use_copy)
        return keys[:count]

    def _use_copy(self, copy: ann_memory.HugeCopy) -> None:
        """View ``copy`` (the saved file's bytes in huge pages) instead of the file: the same
        graph, so the same answers, from fewer address-cache misses per step."""
        restored = _usearch_index().restore(copy.view, view=True)
        if restored is None or len(restored) != len(self._index):
            return
        if self.by_product:
            restored.metric = "ip"
        self.huge_copy = copy  # kept first: the new view reads it
        self._index = restored

    def _save_if_due(self) -> None:
        if self._unsaved > SAVE_FRACTION * max(len(self), 1):
            self.save()

    def save(self) -> None:
        """Write the index atomically as ``<covered_seq>.b<build beam>.usearch`` (its vectors
        first, see :attr:`save_vectors`), mode 0600, and drop older files."""
        if self._folder is None:
            return
        try:
            private_folder(self._folder)
            vectors = None
            if self.save_vectors is not None:
                vectors = vector_file.file_name(self.covered_seq)
                self.save_vectors(self._folder, self.covered_seq)
            copies = self._copies_written(self._folder)
            temporary = self._folder / f".tmp-{os.getpid()}-{secrets.token_hex(4)}"
            self._index.save(str(temporary))
            os.chmod(temporary, FILE_MODE)  # usearch writes it with the umask's mode
            name = f"{self.covered_seq}.b{self.built_with}.usearch"
            os.replace(temporary, self._folder / name)
            for _, _, path in _saved(self._folder):
                if path.name != name:  # older, or a foreign file that failed its check
                    path.unlink(missing_ok=True)
            for path in vector_file.saved_files(self._folder):
                if path.name != vectors:
                    path.unlink(missing_ok=True)
            for path in copy_file.saved_files(self._folder):
                if copies is None or path.name != copies.name:
                    path.unlink(missing_ok=True)
            self.copy_file = None if copies is None else self._saved_copies()
        except OSError as exc:  # a read-only folder: keep working from memory
            log.warning("cannot save the ANN index in %s: %s", self._folder, exc)
            return
        self._unsaved = 0


def older_build(folder: Path | None) -> bool:
    """Whether the newest index saved in ``folder`` was built with a narrower beam than
    :data:`ann_beam.EXPANSION_ADD` (by an older recalld)."""
    if folder is None or not folder.is_dir():
        return False
    saved = sorted(_saved(folder), reverse=True)
    return bool(saved) and saved[0][1] < ann_beam.EXPANSION_ADD


def _usearch_index() -> Any:
    """The ``Index`` class of usearch, imported after onnxruntime when that is installed.

    usearch 2.26.6 loaded before onnxruntime 1.31.1 crashes the process on onnxruntime's
    import (reproduced with ``python -c "import usearch.index; import onnxruntime"``).
    """
    with contextlib.suppress(ImportError):
        import onnxruntime  # noqa: F401
    from usearch.index import Index

    return Index


def _new_index(dimension: int) -> Any:
    Index = _usearch_index()

    return Index(
        ndim=dimension,
        metric="cos",
        dtype=QUANTIZATION,
        connectivity=ann_beam.CONNECTIVITY,
        expansion_add=ann_beam.EXPANSION_ADD,
        expansion_search=ann_beam.EXPANSION_SEARCH_MIN,
    )


_SAVED_NAME = re.compile(r"(\d+)(?:\.b(\d+))?")


def _saved(folder: Path) -> list[tuple[int, int, Path]]:
    """The saved index files: (last row covered, build beam, path)."""
    found = []
    for path in folder.glob("*.usearch"):
        name = _SAVED_NAME.fullmatch(path.stem)
        if name is not None:
            beam = int(name[2]) if name[2] else ann_beam.LEGACY_EXPANSION_ADD
            found.append((int(name[1]), beam, path))
    return found


def _stacked(rows: list[Any]) -> npt.NDArray[Any]:
    """Copies of equal size as the rows of one matrix."""
    if not rows:
        return np.zeros((0, 0), np.int8)
    return np.concatenate(rows).reshape(len(rows), -1)


def _cosine(a: Matrix, b: Matrix) -> float:
    return float(a @ b / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-12))
