"""The exact vector scan: the best rows of a matrix by their cosine with the query, each
score the one :func:`cosines` gives, read at BLAS's speed.

Why: a store below the ANN index's size (and a filter's subset of any store) is searched
by scoring every row. ``cosines`` (numpy's own loop, chosen so no BLAS thread spins on the
other core) reads the matrix at about half the rate of OpenBLAS's product on one thread
once the matrix is not in the caches: 15.0 against 6.5 ms for 50k x 384 float32, 3.5
against 1.7 ms for 20k, 2.3 against 2.0 for 10k after other work (0.7 against 0.6 when
the same product runs again at once). Whole searches: 0.60x the p50 of a 40k store, 0.85x
of a 10k one (docs/design/search-cpu.md, "The exact scan through BLAS").

The two sum each row's products in a different order, so their floats may differ in the
last bits, and a search's scores must not depend on the path: BLAS only preselects. A dot
product of ``d`` float32 terms summed in any order errs by at most ``d * 2**-24 * |q| *
|v|``, so the two scores of a row differ by at most twice that, and every row of the ``count``
best by ``cosines`` has a BLAS score within four times that of the ``count``-th best BLAS
score (the ``count`` rows at or above it score at least that less twice the bound by
``cosines`` too). The rows within that band (widened :data:`SAFETY` times) are scored again
by ``cosines`` and ranked, so the rows returned are those ``cosines`` over every row
selects, and the scores the mirror then gives them the same to the bit.

BLAS is held to one thread while it runs (``threadpoolctl``; a process-wide setting, so a
count of scans in progress restores the caller's own setting when the last ends). Without
a BLAS numpy's product would go through, or under :data:`BLAS_MIN_ROWS`, ``cosines`` scores
every row itself.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

BLAS_MIN_ROWS = 8_192
"""Rows from which the preselection through BLAS runs. Whole searches of a 10k store
(``scripts/bench_code_ab.py``, 200 questions, 3 pairs, load 3.5-4.4, where the searches'
other work keeps the matrix out of the caches): CPU 0.88x, p50 0.85x, the same top 10s.
Smaller matrices stay in the caches; the preselection's second pass is not worth it there."""
ROUNDING = 2.0**-24
"""float32's unit roundoff."""
SAFETY = 2.0
"""How many times the preselection's band is wider than the rounding bound requires (the
bound's own terms, the norms, are rounded floats too)."""

Rows = npt.NDArray[np.int64]
Matrix = npt.NDArray[np.float32]


def cosines(matrix: Matrix, query: npt.NDArray[np.float32]) -> Matrix:
    """``matrix @ query`` for unit rows by numpy's own loop: the scores every search returns.

    Not BLAS's product as such: OpenBLAS spreads a product this size over a thread per core,
    and its threads then spin waiting for more work (on the 2-core machine, 50 searches of a
    10k store: 57 ms of CPU and 29 ms wall per search through BLAS, 33 and 16.5 with it held
    to one thread), taking the core the query's embedding and the word channels need.
    :func:`best_rows` holds BLAS to one thread to preselect, and ranks by these scores.
    """
    scores: Matrix = np.einsum("ij,j->i", matrix, query)
    return scores


def best_rows(
    matrix: Matrix,
    query: npt.NDArray[np.float32],
    mask: npt.NDArray[np.bool_] | None,
    count: int,
    norm_max: float,
) -> Rows:
    """The rows (of ``matrix``, among ``mask``'s when given) of the ``count`` best cosines
    with ``query`` as :func:`cosines` scores them, in no order; ``norm_max``: at
    least the largest norm of a row of ``matrix``. A tie at the ``count``-th score keeps
    the lower rows through BLAS, any of them without."""
    allowed = len(matrix) if mask is None else int(mask.sum())
    count = min(count, allowed)
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    if len(matrix) < BLAS_MIN_ROWS or not _BLAS.available():
        scores = cosines(matrix, query)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        return np.argpartition(-scores, count - 1)[:count]
    with _BLAS.one_thread():
        quick: Matrix = matrix @ query
    if mask is not None:
        quick = np.where(mask, quick, -np.inf)
    band = 4 * SAFETY * matrix.shape[1] * ROUNDING * float(np.linalg.norm(query))
    band *= max(norm_max, 1.0)
    kth = np.partition(quick, len(quick) - count)[len(quick) - count]
    rows = np.flatnonzero(quick >= kth - band)
    scores = cosines(matrix[rows], query)
    return rows[np.lexsort((rows, -scores))[:count]]


class _OneThreadBlas:
    """numpy's BLAS, held to one thread while any scan runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._controllers: list[Any] | None = None
        self._running = 0
        self._saved: list[int] = []

    def available(self) -> bool:
        return bool(self._found())

    def _found(self) -> list[Any]:
        if self._controllers is None:
            with self._lock:
                if self._controllers is None:
                    self._controllers = _blas_controllers()
        return self._controllers

    @contextlib.contextmanager
    def one_thread(self) -> Iterator[None]:
        controllers = self._found()
        with self._lock:
            if self._running == 0:
                self._saved = [c.get_num_threads() for c in controllers]
                for c in controllers:
                    c.set_num_threads(1)
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    for c, threads in zip(controllers, self._saved, strict=True):
                        c.set_num_threads(threads)


def _blas_controllers() -> list[Any]:
    """The BLAS libraries loaded in this process (none: threadpoolctl is missing or finds
    none, and the scan scores every row by numpy's own loop)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return []
    return list(ThreadpoolController().select(user_api="blas").lib_controllers)


_BLAS = _OneThreadBlas()
