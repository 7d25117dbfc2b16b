"""The ANN index's vectors at full precision, and their memory ids, in a file beside it,
memory-mapped.

Why: a search of a large store re-scores the index's candidates exactly. Reading those
vectors back from the ``vectors`` table cost about 3.9 ms of a 100k search's 8.8 ms in the
vector channel (432 blobs of 1.5 KB joined with their rows, docs/design/scale-history.md). The
same float32 vectors in a file mapped into the process cost a few microseconds a candidate,
and a new process maps the file instead of reading every vector (which the saved index
exists to avoid: 7-17 s at 1M). The file holds each row's memory id too: reading the ids of
the 216 rows kept from the table cost about 2 ms more (a memory row is large). The scores
are the same float32 cosines as before; float16 copies would have halved the file but
changed scores in their last bits, so ties and cuts could move.

The file is written whenever the index is saved, under the index's own ``seq``
(``<folder>/<seq>.vectors``), before the index file itself, so a reader that finds an index
finds its vectors too. It is never changed in place: :class:`VectorCopies` keeps the rows
changed since (new, updated or removed vectors, as the index's catch-up applies them) in
memory over the mapped file, and the next save writes a new file. Files are created 0600:
they hold the store's vectors, as private as the store.

Layout: a 64-byte header (:data:`MAGIC`, version, dimension, row count, the ``seq`` covered,
the bytes of ids), then the pks (int64, ascending), their ``seq`` values (int64), where each
memory id starts in the ids (int64, one more than the rows), the vectors (float32, one row
per pk), and the ids (UTF-8, one after the other); numbers little-endian.
"""

from __future__ import annotations

import logging
import mmap
import os
import secrets
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from recalld.private_files import replaced_privately

log = logging.getLogger("recalld")

MAGIC = b"RCLDVECS"
VERSION = 2
HEADER = struct.Struct("<8sIIQqQ")
"""magic, version, dimension, rows, seq covered, bytes of ids."""
HEADER_BYTES = 64
"""The header's room in the file (the arrays after it start 8-byte aligned)."""
WRITE_CHUNK = 65_536
"""Rows written at a time (100 MB of float32 at 384 dimensions), so saving never copies every
vector at once."""

Pks = npt.NDArray[np.int64]
Matrix = npt.NDArray[np.float32]
Ids = list[str]
Rows = tuple[Pks, Pks, Matrix, Ids]
"""(pks, seqs, vectors, memory ids) of some rows."""
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
    at = _offsets(count, dimension)
    target = folder / file_name(seq)
    with replaced_privately(target, temporary) as out:
        done = written = 0
        for pks, seqs, vectors, ids in chunks:
            rows = len(pks)
            if done + rows > count or vectors.shape[1:] != (dimension,) or len(ids) != rows:
                raise ValueError("the rows do not match the count or dimension given")
            encoded = [i.encode("utf-8") for i in ids]
            starts = written + np.concatenate([[0], np.cumsum([len(e) for e in encoded])])
            out.seek(at["pks"] + 8 * done)
            out.write(np.ascontiguousarray(pks, dtype="<i8").tobytes())
            out.seek(at["seqs"] + 8 * done)
            out.write(np.ascontiguousarray(seqs, dtype="<i8").tobytes())
            out.seek(at["starts"] + 8 * done)
            out.write(starts.astype("<i8").tobytes())
            out.seek(at["vectors"] + 4 * dimension * done)
            out.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
            out.seek(at["ids"] + written)
            out.write(b"".join(encoded))
            done, written = done + rows, int(starts[-1])
        if done != count:
            raise ValueError(f"{done} rows written where {count} were announced")
        out.seek(at["starts"] + 8 * count)
        out.write(np.array([written], dtype="<i8").tobytes())
        out.seek(0)
        header = HEADER.pack(MAGIC, VERSION, dimension, count, seq, written)
        out.write(header.ljust(HEADER_BYTES, b"\0"))
    return target


def usable(folder: Path, seq: int, dimension: int) -> bool:
    """Whether ``folder`` holds a vectors file for ``seq`` this version reads."""
    return _rows_in(folder / file_name(seq), seq, dimension) is not None


def _rows_in(path: Path, seq: int, dimension: int) -> int | None:
    """The rows of the vectors file at ``path`` when its header and size are those of a file
    for ``seq`` and ``dimension`` written by this version, else None."""
    try:
        with path.open("rb") as f:
            header = f.read(HEADER.size)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    if len(header) < HEADER.size:
        return None
    magic, version, dim, count, covered, id_bytes = HEADER.unpack(header)
    if (magic, version, dim, covered) != (MAGIC, VERSION, dimension, seq) or (
        size != _offsets(count, dim)["ids"] + id_bytes
    ):
        log.warning("ignoring %s: not the vectors of this index", path)
        return None
    return int(count)


def _offsets(count: int, dimension: int) -> dict[str, int]:
    """Where each part of a file of ``count`` rows starts."""
    seqs = HEADER_BYTES + 8 * count
    starts = seqs + 8 * count
    vectors = starts + 8 * (count + 1)
    ids = vectors + 4 * dimension * count
    return {"pks": HEADER_BYTES, "seqs": seqs, "starts": starts, "vectors": vectors, "ids": ids}


class VectorCopies:
    """Full-precision vectors by pk: a mapped file plus the rows changed since it was written.

    A row changed since (:meth:`apply`) is looked up in memory first; a row removed since is
    hidden from the file's answer. :meth:`lookup` answers many pks at once.
    """

    def __init__(
        self,
        dimension: int,
        seq: int,
        file: tuple[Pks, Pks, Pks, Matrix, memoryview] | None = None,
    ) -> None:
        self.dimension = dimension
        self.seq = seq
        """The last ``seq`` of the ``vectors`` table the file covers."""
        empty = np.zeros(0, dtype=np.int64)
        self._pks, self._seqs, self._starts, self._vectors, self._ids = file or (
            empty,
            empty,
            np.zeros(1, np.int64),
            np.zeros((0, dimension), np.float32),
            memoryview(b""),
        )
        self._over_pks: Pks = np.zeros(0, dtype=np.int64)
        self._over_seqs: Pks = np.zeros(0, dtype=np.int64)
        self._over_vectors: Matrix = np.zeros((0, dimension), dtype=np.float32)
        self._over_ids: list[str] = []
        self._gone: Pks = np.zeros(0, dtype=np.int64)
        """Pks of the file changed or removed since (a changed one is in the overlay)."""

    @classmethod
    def open(cls, folder: Path | None, seq: int, dimension: int) -> VectorCopies | None:
        """The file saved for ``seq``, mapped; None when there is none (an index saved by an
        earlier recalld) or it does not hold what its header says."""
        path = None if folder is None else folder / file_name(seq)
        count = None if path is None else _rows_in(path, seq, dimension)
        if path is None or count is None:
            return None
        at = _offsets(count, dimension)
        if count == 0:
            return cls(dimension, seq)
        try:
            with path.open("rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        # Plain arrays over the mapping (numpy's memmap class costs more per indexing).
        pks = np.frombuffer(mapped, dtype="<i8", count=count, offset=at["pks"])
        seqs = np.frombuffer(mapped, dtype="<i8", count=count, offset=at["seqs"])
        starts = np.frombuffer(mapped, dtype="<i8", count=count + 1, offset=at["starts"])
        vectors = np.frombuffer(mapped, dtype="<f4", count=count * dimension, offset=at["vectors"])
        ids = memoryview(mapped)[at["ids"] :]
        if int(starts[-1]) != len(ids):
            return None
        return cls(dimension, seq, (pks, seqs, starts, vectors.reshape(count, dimension), ids))

    def __len__(self) -> int:
        """The rows it holds."""
        held = len(self._pks) - int(np.count_nonzero(self._in_file(self._gone)))
        return held + len(self._over_pks)

    def lookup(self, pks: Pks) -> tuple[npt.NDArray[np.bool_], Pks, Matrix]:
        """For each pk: whether it is held, its ``seq`` (0 if not) and its vector (zeros if
        not), as new arrays."""
        found, seqs, vectors, _ = self._find(pks, ids=False)
        return found, seqs, vectors

    def lookup_ids(self, pks: Pks) -> tuple[npt.NDArray[np.bool_], Pks, Matrix, Ids]:
        """As :meth:`lookup`, with each pk's memory id ('' if not held)."""
        return self._find(pks, ids=True)

    def ids_of(self, pks: Pks) -> Ids:
        """Each pk's memory id ('' if not held)."""
        pks = np.asarray(pks, dtype=np.int64)
        names = [""] * len(pks)
        over, over_rows = positions(self._over_pks, pks)
        for at in np.flatnonzero(over).tolist():
            names[at] = self._over_ids[int(over_rows[at])]
        in_file, rows = positions(self._pks, pks)
        in_file &= ~over
        if len(self._gone) and in_file.any():
            in_file &= ~positions(self._gone, pks)[0]
        self._names(names, in_file, rows[in_file])
        return names

    def _names(self, names: Ids, where: npt.NDArray[np.bool_], rows: Pks) -> None:
        """Fill ``names`` where ``where`` holds with the ids of those file rows."""
        if not len(rows):
            return
        blob = self._ids
        begins, ends = self._starts[rows].tolist(), self._starts[rows + 1].tolist()
        for at, begin, end in zip(np.flatnonzero(where).tolist(), begins, ends, strict=True):
            names[at] = str(blob[begin:end], "utf-8")

    def _find(self, pks: Pks, ids: bool) -> tuple[npt.NDArray[np.bool_], Pks, Matrix, Ids]:
        pks = np.asarray(pks, dtype=np.int64)
        if not len(self._over_pks) and not len(self._gone) and len(pks):
            held, rows = positions(self._pks, pks)
            if held.all():  # the usual case: one gather from the file, no masks
                names = [""] * len(pks)
                if ids:
                    self._names(names, held, rows)
                return held, self._seqs[rows], self._vectors[rows], names if ids else []
        found = np.zeros(len(pks), dtype=np.bool_)
        seqs = np.zeros(len(pks), dtype=np.int64)
        vectors = np.zeros((len(pks), self.dimension), dtype=np.float32)
        names = [""] * len(pks) if ids else []
        if not len(pks):
            return found, seqs, vectors, names
        over, over_rows = positions(self._over_pks, pks)
        if over.any():
            found[over] = True
            seqs[over] = self._over_seqs[over_rows[over]]
            vectors[over] = self._over_vectors[over_rows[over]]
            for at in np.flatnonzero(over).tolist() if ids else ():
                names[at] = self._over_ids[int(over_rows[at])]
        in_file, rows = positions(self._pks, pks)
        in_file &= ~over
        if len(self._gone) and in_file.any():
            in_file &= ~positions(self._gone, pks)[0]
        if in_file.any():
            found[in_file] = True
            picked = rows[in_file]
            seqs[in_file] = self._seqs[picked]
            vectors[in_file] = self._vectors[picked]
            if ids:
                self._names(names, in_file, picked)
        return found, seqs, vectors, names

    def apply(self, dropped: Pks, pks: Pks, seqs: Pks, vectors: Matrix, ids: Ids) -> None:
        """Remove ``dropped``; (re)place ``pks`` with their ``seqs``, ``vectors`` and memory
        ``ids``."""
        changed = np.union1d(np.asarray(dropped, np.int64), np.asarray(pks, np.int64))
        if not len(changed):
            return
        self._gone = np.union1d(self._gone, changed[self._in_file(changed)])
        keep = ~np.isin(self._over_pks, changed)
        merged_pks = np.concatenate([self._over_pks[keep], np.asarray(pks, np.int64)])
        merged_seqs = np.concatenate([self._over_seqs[keep], np.asarray(seqs, np.int64)])
        added = np.asarray(vectors, np.float32).reshape(-1, self.dimension)
        merged = np.concatenate([self._over_vectors[keep], added])
        names = [n for n, k in zip(self._over_ids, keep.tolist(), strict=True) if k] + list(ids)
        order = np.argsort(merged_pks, kind="stable")
        self._over_pks, self._over_seqs = merged_pks[order], merged_seqs[order]
        self._over_vectors = merged[order]
        self._over_ids = [names[i] for i in order.tolist()]

    def rows(self) -> tuple[int, Iterator[Rows]]:
        """Every row held, in ascending pk order (a :data:`RowSource`)."""
        kept = np.ones(len(self._pks), dtype=np.bool_)
        if len(self._gone):
            kept = ~np.isin(np.asarray(self._pks), self._gone)
        every = np.union1d(np.asarray(self._pks)[kept], self._over_pks)

        def chunks() -> Iterator[Rows]:
            for start in range(0, len(every), WRITE_CHUNK):
                chunk = every[start : start + WRITE_CHUNK]
                _, seqs, vectors, ids = self.lookup_ids(chunk)
                yield chunk, seqs, vectors, ids

        return len(every), chunks()

    def _in_file(self, pks: Pks) -> npt.NDArray[np.bool_]:
        return positions(self._pks, pks)[0]


def positions(sorted_pks: Pks, pks: Pks) -> tuple[npt.NDArray[np.bool_], Pks]:
    """For each of ``pks``: whether ``sorted_pks`` holds it, and where."""
    if not len(sorted_pks) or not len(pks):
        return np.zeros(len(pks), dtype=np.bool_), np.zeros(len(pks), dtype=np.int64)
    at = np.searchsorted(sorted_pks, pks)
    at = np.minimum(at, len(sorted_pks) - 1)
    return np.asarray(sorted_pks[at] == pks), at.astype(np.int64)
