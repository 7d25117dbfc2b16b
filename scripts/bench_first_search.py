"""First vector search of a new process on an SQLite store: ``lazy`` (the saved ANN index
alone, the default path) or ``mirror`` (every vector loaded first, the previous path).

Usage: ``python scripts/bench_first_search.py STORE.db lazy|mirror``; prints one JSON line.
The store's folder must hold the ``pool.npz`` that ``recalld bench scale`` writes (three of
its vectors are the queries). Run each mode in a fresh process, alternating.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from recalld.bench import scale_corpus as sc
from recalld.bench.scale_worker import peak_rss_mb
from recalld.stores.asks import NearestAsk
from recalld.stores.base import CandidateRequest
from recalld.stores.sqlite import SQLiteStore


def main(db: str, mode: str) -> None:
    queries = sc.Pool.load(Path(db).parent / "pool.npz").vectors[[0, 1, 2]]
    started = time.perf_counter()
    store = SQLiteStore(db)
    store.vector_reads.lazy_tried = mode == "mirror"  # the mirror path, as before the lazy index
    opened = time.perf_counter()
    store.candidates(CandidateRequest(asks={"semantic": NearestAsk(40, queries[0])}))
    first = time.perf_counter()
    later = []
    for query in queries[1:]:
        began = time.perf_counter()
        store.candidates(CandidateRequest(asks={"semantic": NearestAsk(40, query)}))
        later.append((time.perf_counter() - began) * 1000)
    print(
        json.dumps(
            {
                "mode": mode,
                "open_s": opened - started,
                "first_search_s": first - opened,
                "next_ms": later,
                "lazy": store.vector_reads.lazy is not None,
                "mirror_rows": store.vector_reads.mirror.size,
                "peak_mb": peak_rss_mb(),
            }
        )
    )
    store.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in ("lazy", "mirror"):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
