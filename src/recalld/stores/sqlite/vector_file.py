"""The ANN index's vectors at full precision, in a file beside it, memory-mapped.

Why: a search of a large store re-scores the index's candidates exactly. Reading those
vectors back from the ``vectors`` table cost about 3.9 ms of a 100k search's 8.8 ms in the
vector channel (432 blobs of 1.5 KB joined with their rows, docs/benchmarks-scale.md). The
same float32 vectors in a file mapped into the process cost a few microseconds a candidate,
and a new process maps the file instead of reading every vector (which the saved index
exists to avoid: 7-17 s at 1M). The scores are the same float32 cosines as before; float16
copies would have halved the file but changed scores in their last bits, so ties and cuts
could move.

The file is written whenever the index is saved, under the index's own ``seq``
(``<folder>/<seq>.vectors``), before the index file itself, so a reader that finds an index
finds its vectors too. It is never changed in place: :class:`VectorCopies` keeps the rows
changed since (new, updated or removed vectors, as the index's catch-up applies them) in
memory over the mapped file, and the next save writes a new file. Files are created 0600:
they hold the store's vectors, as private as the store.

Layout: a 64-byte header (:data:`MAGIC`, version, dimension, row count, the ``seq`` covered),
then the pks (int64, ascending), their ``seq`` values (int64), and the vectors (float32,
one row per pk), all little-endian.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

log = logging.getLogger("recalld")

MAGIC = b"RCLDVECS"
VERSION = 1
HEADER = struct.Struct("<8sIIQq")
"""magic, version, dimension, rows, seq covered."""
HEADER_BYTES = 64
"""The header's room in the file (the arrays after it start 8-byte aligned)."""
WRITE_CHUNK = 65_536
"""Rows written at a time (100 MB of float32 at 384 dimensions), so saving never copies every
vector at once."""
PRIVATE = 0o600
"""The mode of every file written here: the store's vectors are as private as its rows."""

Pks = npt.NDArray[np.int64]
Matrix = npt.NDArray[np.float32]
Rows = tuple[Pks, Pks, Matrix]
"""(pks, seqs, vectors) of some rows."""
RowSource = Callable[[], tuple[int, Iterator[Rows]]]
"""How many rows, then the rows in ascending pk order, a chunk at a time."""


def file_name(seq: int) -> str:
    return f"{seq}.vectors"


def saved_files(folder: Path) -> list[Path]:
    return [p for p in folder.glob("*.vectors") if p.stem.isdigit()]


def write(folder: Path, seq: int, dimension: int, source: RowSource) -> Path:
    """Write the rows of ``source`` as ``<seq>.vectors`` (atomically, mode 0600)."""
    count, chunks = source()
    temporary = folder / f".tmp-{os.getpid()}-{secrets.token_hex(4)}.vectors"
    pks_at = HEADER_BYTES
    seqs_at = pks_at + 8 * count
    vectors_at = seqs_at + 8 * count
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(HEADER.pack(MAGIC, VERSION, dimension, count, seq).ljust(HEADER_BYTES, b"\0"))
            done = 0
            for pks, seqs, vectors in chunks:
                rows = len(pks)
                if done + rows > count or vectors.shape[1:] != (dimension,):
                    raise ValueError("the rows do not match the count or dimension given")
                out.seek(pks_at + 8 * done)
                out.write(np.ascontiguousarray(pks, dtype="<i8").tobytes())
                out.seek(seqs_at + 8 * done)
                out.write(np.ascontiguousarray(seqs, dtype="<i8").tobytes())
                out.seek(vectors_at + 4 * dimension * done)
                out.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
                done += rows
            if done != count:
                raise ValueError(f"{done} rows written where {count} were announced")
        target = folder / file_name(seq)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    return target


class VectorCopies:
    """Full-precision vectors by pk: a mapped file plus the rows changed since it was written.

    A row changed since (:meth:`apply`) is looked up in memory first; a row removed since is
    hidden from the file's answer. :meth:`lookup` answers many pks at once.
    """

    def __init__(self, dimension: int, pks: Pks, seqs: Pks, vectors: Matrix, seq: int) -> None:
        self.dimension = dimension
        self.seq = seq
        """The last ``seq`` of the ``vectors`` table the file covers."""
        self._pks, self._seqs, self._vectors = pks, seqs, vectors
        self._over_pks: Pks = np.zeros(0, dtype=np.int64)
        self._over_seqs: Pks = np.zeros(0, dtype=np.int64)
        self._over_vectors: Matrix = np.zeros((0, dimension), dtype=np.float32)
        self._gone: Pks = np.zeros(0, dtype=np.int64)
        """Pks of the file changed or removed since (a changed one is in the overlay)."""

    @classmethod
    def open(cls, folder: Path | None, seq: int, dimension: int) -> VectorCopies | None:
        """The file saved for ``seq``, mapped; None when there is none (an index saved by an
        earlier recalld) or it does not hold what its header says."""
        if folder is None:
            return None
        path = folder / file_name(seq)
        try:
            with path.open("rb") as f:
                header = f.read(HEADER.size)
                size = os.fstat(f.fileno()).st_size
        except OSError:
            return None
        if len(header) < HEADER.size:
            return None
        magic, version, dim, count, covered = HEADER.unpack(header)
        expected = HEADER_BYTES + count * (16 + 4 * dim)
        if (magic, version, dim, covered) != (MAGIC, VERSION, dimension, seq) or size != expected:
            log.warning("ignoring %s: not the vectors of this index", path)
            return None
        if count == 0:
            empty = np.zeros(0, dtype=np.int64)
            return cls(dimension, empty, empty, np.zeros((0, dim), np.float32), seq)
        try:
            pks = np.memmap(path, dtype="<i8", mode="r", offset=HEADER_BYTES, shape=(count,))
            seqs = np.memmap(path, dtype="<i8", mode="r", offset=HEADER_BYTES + 8 * count,
                             shape=(count,))  # fmt: skip
            vectors = np.memmap(path, dtype="<f4", mode="r", offset=HEADER_BYTES + 16 * count,
                                shape=(count, dim))  # fmt: skip
        except (OSError, ValueError):
            return None
        return cls(dimension, pks, seqs, vectors, seq)

    def __len__(self) -> int:
        """The rows it holds."""
        held = len(self._pks) - int(np.count_nonzero(self._in_file(self._gone)))
        return held + len(self._over_pks)

    def lookup(self, pks: Pks) -> tuple[npt.NDArray[np.bool_], Pks, Matrix]:
        """For each pk: whether it is held, its ``seq`` (0 if not) and its vector (zeros if
        not), as new arrays."""
        pks = np.asarray(pks, dtype=np.int64)
        found = np.zeros(len(pks), dtype=np.bool_)
        seqs = np.zeros(len(pks), dtype=np.int64)
        vectors = np.zeros((len(pks), self.dimension), dtype=np.float32)
        if not len(pks):
            return found, seqs, vectors
        over, over_rows = _positions(self._over_pks, pks)
        if over.any():
            found[over] = True
            seqs[over] = self._over_seqs[over_rows[over]]
            vectors[over] = self._over_vectors[over_rows[over]]
        in_file, rows = _positions(self._pks, pks)
        in_file &= ~over
        if len(self._gone) and in_file.any():
            in_file &= ~_positions(self._gone, pks)[0]
        if in_file.any():
            found[in_file] = True
            picked = rows[in_file]
            seqs[in_file] = self._seqs[picked]
            vectors[in_file] = self._vectors[picked]
        return found, seqs, vectors

    def apply(self, dropped: Pks, pks: Pks, seqs: Pks, vectors: Matrix) -> None:
        """Remove ``dropped``; (re)place ``pks`` with their ``seqs`` and ``vectors``."""
        changed = np.union1d(np.asarray(dropped, np.int64), np.asarray(pks, np.int64))
        if not len(changed):
            return
        self._gone = np.union1d(self._gone, changed[self._in_file(changed)])
        keep = ~np.isin(self._over_pks, changed)
        merged_pks = np.concatenate([self._over_pks[keep], np.asarray(pks, np.int64)])
        merged_seqs = np.concatenate([self._over_seqs[keep], np.asarray(seqs, np.int64)])
        added = np.asarray(vectors, np.float32).reshape(-1, self.dimension)
        merged = np.concatenate([self._over_vectors[keep], added])
        order = np.argsort(merged_pks, kind="stable")
        self._over_pks, self._over_seqs = merged_pks[order], merged_seqs[order]
        self._over_vectors = merged[order]

    def rows(self) -> tuple[int, Iterator[Rows]]:
        """Every row held, in ascending pk order (a :data:`RowSource`)."""
        kept = np.ones(len(self._pks), dtype=np.bool_)
        if len(self._gone):
            kept = ~np.isin(np.asarray(self._pks), self._gone)
        every = np.union1d(np.asarray(self._pks)[kept], self._over_pks)

        def chunks() -> Iterator[Rows]:
            for start in range(0, len(every), WRITE_CHUNK):
                chunk = every[start : start + WRITE_CHUNK]
                _, seqs, vectors = self.lookup(chunk)
                yield chunk, seqs, vectors

        return len(every), chunks()

    def _in_file(self, pks: Pks) -> npt.NDArray[np.bool_]:
        return _positions(self._pks, pks)[0]


def _positions(sorted_pks: Pks, pks: Pks) -> tuple[npt.NDArray[np.bool_], Pks]:
    """For each of ``pks``: whether ``sorted_pks`` holds it, and where."""
    if not len(sorted_pks) or not len(pks):
        return np.zeros(len(pks), dtype=np.bool_), np.zeros(len(pks), dtype=np.int64)
    at = np.searchsorted(sorted_pks, pks)
    at = np.minimum(at, len(sorted_pks) - 1)
    return np.asarray(sorted_pks[at] == pks), at.astype(np.int64)
