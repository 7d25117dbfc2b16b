"""What if the ANN index took over earlier? Search latency on an SQLite store with the vector
mirror's ANN threshold set to ``THRESHOLD`` rows (the default is ``ANN_MIN_ROWS``, 200k).

Usage: ``python scripts/bench_ann_threshold.py STORE.db THRESHOLD QUESTIONS.json INDEX_DIR``;
prints one JSON line. ``QUESTIONS.json`` is a list of question strings; the index is built
(once) and saved in ``INDEX_DIR``, not beside the store, so the store itself is unchanged.
Each search embeds its question with the packaged model, limit 10, as ``bench scale`` does.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

import recalld
from recalld.config import Settings
from recalld.providers.embedders import resolve_embedder
from recalld.stores.sqlite.vectors import VectorMirror


def main(db: str, threshold: int, questions_file: str, index_dir: str) -> None:
    model = resolve_embedder("local")
    model.embed_query("warm up the model")
    questions: list[str] = json.loads(Path(questions_file).read_text(encoding="utf-8"))
    settings = Settings(db=Path(db), cache_dir=None, embedder="local")
    with recalld.open(settings=settings, embedder=model) as engine:
        store: object = engine.store
        store.vector_reads.mirror = VectorMirror(Path(index_dir), ann_min_rows=threshold)  # type: ignore[attr-defined]
        store.vector_reads.lazy_tried = True  # type: ignore[attr-defined]
        started = time.perf_counter()
        engine.search(questions[0], limit=10, mode="vector")
        out: dict[str, object] = {"threshold": threshold,
                                  "first_search_s": time.perf_counter() - started,
                                  "ann": store.vector_reads.mirror.uses_ann}  # type: ignore[attr-defined]  # fmt: skip
        for mode in ("vector", "hybrid"):
            times = []
            for question in questions:
                began = time.perf_counter()
                engine.search(question, limit=10, mode=mode)
                times.append((time.perf_counter() - began) * 1000)
            out[mode] = {"p50_ms": float(np.percentile(times, 50)),
                         "p95_ms": float(np.percentile(times, 95))}  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
