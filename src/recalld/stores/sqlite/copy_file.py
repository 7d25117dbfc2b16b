"""The ANN index's own int8 copies of its vectors as one matrix in a file beside it,
memory-mapped.

Why: a filter that leaves a large subset of a large store (a month of the 1M store: 42k
rows) is searched exactly, its rows first ranked by the index's int8 copies
(:data:`~recalld.stores.sqlite.lazy_vectors.PRESELECT_FACTOR`). usearch hands those copies
out one row at a time: 29-40 ms for the 42k, then 5 more to join them into a matrix. The
same copies as rows of one matrix in a mapped file are one gather (about 3 ms for 42k), and
the scores are those of the same bytes, so the ranking is the same to the bit.

The copies are the index's own: the file is written from the index (``get_many``) whenever
the index is saved, under its ``seq`` (``<folder>/<seq>.copies``), before the index file,
and never changed in place. A store whose index was saved without it (by an earlier
recalld) gets one the first time a process opens that index for searching. Rows changed
since the file was written (added, replaced or removed, as the index's catch-up applies
them) are noted in memory by the index (:meth:`CopyMatrix.note`) and asked of the index
itself, so the copies read are always those of the index in memory. Files are created
0600: they hold the store's vectors, as private as the store. Being mapped read-only,
the file's pages are shared by every process that searches the store (the workers of one
``recalld serve``): 396 MB for 1M rows of 384 dimensions, once. A process keeps privately
only the pks noted since the file (at most ``vector_index.SAVE_FRACTION`` of the rows before
the index is saved again).

The file holds each copy's norm too (the copies are not unit vectors once quantized), as
:func:`copy_norms` computes it: scoring a copy then takes one product, not two, and the same
float32 norm, so the same score to the bit (:func:`copy_cosines`; the norm of a row does not
depend on the rows beside it in its block, checked over the 1M store's rows shuffled).

Layout: a 64-byte header (:data:`MAGIC`, version, bytes per row, row count, the ``seq``
covered, numpy's name of the copies' type), then the pks (int64, ascending), the norms
(float32) and the copies (one row of bytes per pk); numbers little-endian.
"""

from __future__ import annotations

import functools
import logging
import mmap
import os
import secrets
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.private_files import replaced_privately
from recalld.stores.base import Vector
from recalld.stores.sqlite.vector_file import positions

log = logging.getLogger("recalld")

MAGIC = b"RCLDCOPY"
VERSION = 1
HEADER = struct.Struct("<8sIIQq8s")
"""magic, version, bytes per row, rows, seq covered, numpy type name."""
HEADER_BYTES = 64
"""The header's room in the file (the pks after it start 8-byte aligned)."""
WRITE_CHUNK = 65_536
"""Rows read from the index and written at a time (25 MB of int8 at 384 dimensions)."""
COPY_BLOCK = 2048
"""Copies turned into float32 at a time to score them (3 MB, kept in cache; all 42k of a
month of the 1M store at once were 64 MB, and took twice as long)."""
SCORE_BLOCK = 1024
"""Rows of the file gathered and scored at a time by :meth:`CopyMatrix.cosines` (384 kB
of int8 at 384 dimensions, kept in cache between the gather and the product)."""
DENSE_SPAN = 4
"""A file whose pks span at most this many times its rows finds a pk's row in a table
over that span (4 bytes a pk: 4 MB at 1M rows, private to the process, built on the
first lookup), not by a binary search over all of them (a month of the 1M store, 42k pks
in time order: 0.4 against 4.5 ms)."""

Pks = npt.NDArray[np.int64]
Copies = Callable[[Pks], Sequence[Any]]
"""The index's copies of the rows of some pks (None for a row it lacks)."""


def file_name(seq: int) -> str:
    return f"{seq}.copies"


def saved_files(folder: Path) -> list[Path]:
    return [p for p in folder.glob("*.copies") if p.stem.isdigit()]


def write(folder: Path, seq: int, pks: Pks, copies: Copies) -> Path | None:
    """Write the ``copies`` of the rows ``pks`` (ascending, every one held) and their norms
    as ``<seq>.copies`` (atomically, mode 0600); None when they are not one fixed-size
    numpy type (nothing is written)."""
    sample = list(copies(pks[:1])) if len(pks) else []
    if sample and (sample[0] is None or not isinstance(sample[0], np.ndarray)):
        return None
    kind = sample[0].dtype if sample else np.dtype(np.int8)
    width = sample[0].nbytes if sample else 0
    temporary = folder / f".tmp-{os.getpid()}-{secrets.token_hex(4)}.copies"
    at = _offsets(len(pks), width)
    target = folder / file_name(seq)
    with replaced_privately(target, temporary) as out:
        name = kind.str.encode("ascii")
        out.write(HEADER.pack(MAGIC, VERSION, width, len(pks), seq, name).ljust(HEADER_BYTES))
        out.write(np.ascontiguousarray(pks, dtype="<i8").tobytes())
        for start in range(0, len(pks), WRITE_CHUNK):
            chunk = list(copies(pks[start : start + WRITE_CHUNK]))
            if any(c is None or c.dtype != kind or c.nbytes != width for c in chunk):
                raise ValueError("the index lacks a row it listed, or its copies differ")
            matrix = np.concatenate(chunk).reshape(len(chunk), -1)
            out.seek(at["norms"] + 4 * start)
            out.write(copy_norms(matrix).astype("<f4").tobytes())
            out.seek(at["rows"] + width * start)
            out.write(matrix.tobytes())
    return target


def _offsets(count: int, width: int) -> dict[str, int]:
    """Where each part of a file of ``count`` rows of ``width`` bytes starts, and its end."""
    norms = HEADER_BYTES + 8 * count
    rows = norms + 4 * count
    return {"pks": HEADER_BYTES, "norms": norms, "rows": rows, "end": rows + width * count}


def copy_norms(copies: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    """The length of each copy as float32, :data:`COPY_BLOCK` rows at a time."""
    norms = np.empty(len(copies), dtype=np.float32)
    for start in range(0, len(copies), COPY_BLOCK):
        block = copies[start : start + COPY_BLOCK].astype(np.float32)
        norms[start : start + COPY_BLOCK] = np.sqrt(np.einsum("ij,ij->i", block, block))
    return norms


def copy_cosines(
    copies: npt.NDArray[Any], query: Vector, norms: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """The query's cosine with each copy (whose :func:`copy_norms` are ``norms``),
    :data:`COPY_BLOCK` rows at a time."""
    scores = np.empty(len(copies), dtype=np.float32)
    for start in range(0, len(copies), COPY_BLOCK):
        block = copies[start : start + COPY_BLOCK].astype(np.float32)
        scores[start : start + COPY_BLOCK] = _cosines(
            block, query, norms[start : start + COPY_BLOCK]
        )
    return scores


def _cosines(
    block: npt.NDArray[Any], query: Vector, norms: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """``block``'s products with the float32 ``query`` over their ``norms``: numpy's own
    loop, as ``exact_scan.cosines``, in float32 with the copies cast as they are read
    (the same floats as cast first)."""
    products = np.einsum("ij,j->i", block, query, dtype=np.float32, casting="unsafe")
    scores: npt.NDArray[np.float32] = products / np.maximum(norms, 1e-12)
    return scores


class CopyMatrix:
    """The copies of a saved index by pk: the mapped file, less the rows changed since."""

    def __init__(
        self, seq: int, pks: Pks, norms: npt.NDArray[np.float32], rows: npt.NDArray[Any]
    ) -> None:
        self.seq = seq
        """The ``seq`` of the index the file was written from."""
        self._pks = pks
        self._norms = norms
        self._rows = rows
        self._changed: Pks = np.zeros(0, dtype=np.int64)
        """Pks changed in the index since the file was written (sorted)."""

    @classmethod
    def open(cls, folder: Path | None, seq: int) -> CopyMatrix | None:
        """The file written for ``seq``, mapped; None when there is none or it does not hold
        what its header says."""
        path = None if folder is None else folder / file_name(seq)
        if path is None or not path.is_file():
            return None
        try:
            with path.open("rb") as f:
                header = f.read(HEADER.size)
                size = os.fstat(f.fileno()).st_size
                magic, version, width, count, covered, name = HEADER.unpack(header)
                kind = np.dtype(name.rstrip(b"\0").decode("ascii"))
                at = _offsets(count, width)
                if (magic, version, covered) != (MAGIC, VERSION, seq) or size != at["end"]:
                    raise ValueError("not the copies of this index")
                if count == 0 or width % kind.itemsize:
                    empty = np.zeros(0, np.float32)
                    return cls(seq, np.zeros(0, np.int64), empty, np.zeros((0, 0), kind))
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError, TypeError, struct.error) as exc:
            log.warning("ignoring %s: %s", path, exc)
            return None
        # Plain arrays over the mapping (numpy's memmap class costs more per indexing).
        pks = np.frombuffer(mapped, dtype="<i8", count=count, offset=at["pks"])
        norms = np.frombuffer(mapped, dtype="<f4", count=count, offset=at["norms"])
        per_row = width // kind.itemsize
        rows = np.frombuffer(mapped, kind, count * per_row, at["rows"])
        return cls(seq, pks, norms, rows.reshape(count, per_row))

    def __len__(self) -> int:
        return len(self._pks)

    def norm_range(self) -> tuple[float, float]:
        """The smallest and the largest norm of the copies in the file ((0, 0) if none)."""
        if not len(self._norms):
            return 0.0, 0.0
        return float(self._norms.min()), float(self._norms.max())

    @property
    def changed(self) -> Pks:
        """The pks noted since the file was written: a new array at each change."""
        return self._changed

    def note(self, pks: Pks) -> None:
        """Rows of ``pks`` changed in the index since the file was written: asked of it."""
        if len(pks):
            self._changed = np.union1d(self._changed, np.asarray(pks, np.int64))

    def rows_of(self, pks: Pks) -> tuple[npt.NDArray[np.bool_], Pks]:
        """For each of ``pks``: whether the file holds its copy as the index has it now,
        and at which row (0 where it does not)."""
        table = self._table
        if table is not None:
            offset = np.asarray(pks, dtype=np.int64) - int(self._pks[0])
            inside = (offset >= 0) & (offset < len(table))
            at = table[np.where(inside, offset, 0)].astype(np.int64)
            held = inside & (at >= 0)
            at[~held] = 0
        else:
            # Looked up in ascending order: neighbouring pks share the search's first steps
            # in cache (a month of the 1M store, 42k pks in time order: 2.8 ms against 5.4).
            order = np.argsort(pks, kind="stable")
            held, at = np.empty(len(pks), dtype=np.bool_), np.empty(len(pks), dtype=np.int64)
            held[order], at[order] = positions(self._pks, pks[order])
        changed = self._changed  # read once: another thread may note rows meanwhile
        if len(changed):
            held &= ~np.isin(pks, changed)
        return held, at

    @functools.cached_property
    def _table(self) -> npt.NDArray[np.int32] | None:
        """The row of each pk from the first, -1 where none, built on the first read, when
        the pks are dense enough (:data:`DENSE_SPAN`); else None."""
        pks = self._pks
        span = int(pks[-1]) - int(pks[0]) + 1 if len(pks) else 0
        if not 0 < span <= DENSE_SPAN * len(pks) or len(pks) >= 2**31:
            return None
        table = np.full(span, -1, dtype=np.int32)
        table[pks - pks[0]] = np.arange(len(pks), dtype=np.int32)
        return table

    def cosines(self, rows: Pks, query: Vector) -> npt.NDArray[np.float32]:
        """The float32 ``query``'s cosine with the copies at ``rows`` (of :meth:`rows_of`):
        the scores :func:`copy_cosines` gives them, to the bit, without gathering them all
        first. :data:`SCORE_BLOCK` rows at a time are gathered into one buffer and their
        products taken with the copies cast as they are read (numpy's loop and float32
        sums, as ``astype`` then the product; checked over every row of the 1M store)."""
        scores = np.empty(len(rows), dtype=np.float32)
        width = self._rows.shape[1]
        buffer = np.empty((min(SCORE_BLOCK, len(rows)), width), dtype=self._rows.dtype)
        for start in range(0, len(rows), SCORE_BLOCK):
            at = rows[start : start + SCORE_BLOCK]
            block = np.take(self._rows, at, axis=0, out=buffer[: len(at)], mode="clip")
            scores[start : start + len(at)] = _cosines(block, query, self._norms[at])
        return scores

    def empty(self, count: int) -> tuple[npt.NDArray[Any], npt.NDArray[np.float32]]:
        """Uninitialised room for ``count`` copies and their norms."""
        rows = np.empty((count, self._rows.shape[1]), self._rows.dtype)
        return rows, np.empty(count, dtype=np.float32)

    def gather(self, rows: Pks) -> tuple[npt.NDArray[Any], npt.NDArray[np.float32]]:
        """The copies at ``rows`` (of :meth:`rows_of`) and their norms, as new arrays."""
        return self._rows[rows], self._norms[rows]

    def sample(self, count: int) -> tuple[Pks, npt.NDArray[Any], npt.NDArray[np.float32]]:
        """Up to ``count`` pks spread over the file (the last always), their copies and
        norms."""
        if not len(self._pks):
            return np.zeros(0, np.int64), self._rows, self._norms
        rows = np.unique(np.linspace(0, len(self._pks) - 1, count).astype(np.int64))
        return np.asarray(self._pks[rows]), self._rows[rows], self._norms[rows]
