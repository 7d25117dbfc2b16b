"""Search latency of an existing store (SQLite file or PostgreSQL DSN) on ``recalld bench
scale``'s 50 questions, query embedding included, and a digest of every top 10 (ids and
scores), so that runs of different code on the same store can be compared: run it once per
variant in a fresh process, alternating, e.g.

    for i in 1 2; do for c in /tmp/main /tmp/branch; do
        PYTHONPATH=$c/src python scripts/bench_store_latency.py "$DSN" --label $c; done; done

Prints one line per run: vector and hybrid p50 / p95 ms, the results' digest, the load.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

import recalld
from recalld.bench import scale_corpus as sc
from recalld.config import Settings, is_dsn
from recalld.providers.embedders import resolve_embedder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", help="an SQLite file or a postgresql:// DSN")
    parser.add_argument("--data", type=Path, default=Path("../shared/benchmarks"))
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7, help="as bench scale's --seed")
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    source = sc.read_sources(args.data)
    rng = np.random.default_rng(args.seed)  # the questions bench scale picks
    picked = rng.choice(len(source.questions), args.queries, replace=False)
    questions = [source.questions[i] for i in sorted(picked)]
    model = resolve_embedder("local")
    model.embed_query("warm up the model")
    db = args.store if is_dsn(args.store) else Path(args.store)
    timings: dict[str, tuple[float, float]] = {}
    tops: dict[str, list[list[tuple[str, float]]]] = {}
    with recalld.open(settings=Settings(db=db, cache_dir=None), embedder=model) as engine:
        engine.search(questions[0], limit=10, mode="vector")  # the first search apart
        for mode in ("vector", "hybrid"):
            times = []
            for question in questions:
                started = time.perf_counter()
                hits = engine.search(question, limit=10, mode=mode).hits  # type: ignore[arg-type]
                times.append((time.perf_counter() - started) * 1000)
                tops.setdefault(mode, []).append([(h.memory.id, round(h.score, 12)) for h in hits])
            timings[mode] = (float(np.percentile(times, 50)), float(np.percentile(times, 95)))
    digest = hashlib.sha256(json.dumps(tops).encode()).hexdigest()[:12]
    vector, hybrid = timings["vector"], timings["hybrid"]
    print(f"{args.label} vector {vector[0]:.1f} / {vector[1]:.1f} ms, hybrid {hybrid[0]:.1f} / "
          f"{hybrid[1]:.1f} ms, results {digest}, load {os.getloadavg()[0]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
