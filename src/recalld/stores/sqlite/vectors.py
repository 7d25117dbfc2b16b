"""Exact vector search over an in-memory float32 matrix mirrored from the ``vectors`` table.

Why a numpy matrix (measured in docs/benchmarks.md): at 100k x 384 an exact matrix-vector
product plus ``argpartition`` answers in milliseconds on 2 cores with no extension to load,
and it is exact. The mirror is refreshed incrementally: rows carry a growing ``seq``, and
a ``vector_generation`` counter (bumped by a trigger on delete) tells when a full reload is
needed, so another process's writes are seen on the next search.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import numpy.typing as npt

from recalld.stores.base import Vector


class VectorMirror:
    """The store's vectors as one matrix, kept in step with the table."""

    def __init__(self, dimension: int | None = None) -> None:
        self.dimension = dimension
        self.matrix: npt.NDArray[np.float32] = np.zeros((0, dimension or 0), dtype=np.float32)
        self.pks: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._seq = 0
        self._generation = -1

    def refresh(self, db: sqlite3.Connection) -> None:
        generation = int(
            db.execute("SELECT value FROM meta WHERE key = 'vector_generation'").fetchone()[0]
        )
        if generation != self._generation:
            self.matrix = self.matrix[:0]
            self.pks = self.pks[:0]
            self._seq = 0
            self._generation = generation
        rows = db.execute(
            "SELECT seq, pk, vector FROM vectors WHERE seq > ? ORDER BY seq", (self._seq,)
        ).fetchall()
        if not rows:
            return
        blob = b"".join(r[2] for r in rows)
        fresh = np.frombuffer(blob, dtype=np.float32).reshape(len(rows), -1)
        if self.dimension is None or self.matrix.shape[1] != fresh.shape[1]:
            self.dimension = fresh.shape[1]
            self.matrix = np.zeros((0, self.dimension), dtype=np.float32)
        # An update deletes then inserts, so the generation changed and we reloaded above;
        # rows here are therefore all new pks.
        self.matrix = np.vstack([self.matrix, fresh])
        self.pks = np.concatenate([self.pks, np.fromiter((r[1] for r in rows), np.int64)])
        self._seq = rows[-1][0]

    def search(
        self, query: Vector, limit: int, allowed: npt.NDArray[np.bool_] | None
    ) -> list[tuple[int, float]]:
        """Top ``limit`` (pk, cosine) pairs; ``allowed`` masks rows of the matrix."""
        if len(self.pks) == 0 or limit <= 0:
            return []
        scores = self.matrix @ query.astype(np.float32)
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
        count = min(limit, int(np.isfinite(scores).sum()))
        if count == 0:
            return []
        top = np.argpartition(-scores, count - 1)[:count]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(self.pks[i]), float(scores[i])) for i in top]
