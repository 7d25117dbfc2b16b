"""Search latency on an existing scale store, the way ``recalld bench scale`` times it, in
alternating rounds so that variants compare under the same load (after one untimed pass
over the questions, which reads the store's pages from disk).

Usage::

    PYTHONPATH=src python scripts/bench_search_latency.py STORE.db \
        [--data ../shared/benchmarks] [--queries 50] [--rounds 3] [--modes hybrid,vector] \
        [--serial-too] [--profile OUT.prof]

The questions are the ones ``bench scale`` picks (same seed, same count). Each search embeds
its question with the packaged model, limit 10, default settings, no LLM. Prints one JSON
object: per round and mode p50 / p95 ms, the query embedding alone, and the load average.
``--serial-too`` adds, in every round, the hybrid search on one thread (the word channels
not read beside the query's embedding, BM25 not split by rows: both thresholds raised out
of reach), so the two compare under the same load. ``--profile`` runs one extra pass of
hybrid searches under cProfile and saves the stats.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import recalld
from recalld.bench import scale_corpus as sc
from recalld.config import Settings
from recalld.providers.embedders import resolve_embedder
from recalld.stores.sqlite import queries as sqlite_queries, store as sqlite_store


def questions_of(data: Path, count: int, seed: int = 7) -> list[str]:
    """The questions ``bench scale`` searches with (its seeded pick)."""
    source = sc.read_sources(data)
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(source.questions), count, replace=False)
    return [source.questions[i] for i in sorted(picked)]


def timed(questions: list[str], call: object) -> dict[str, float]:
    times = []
    for question in questions:
        began = time.perf_counter()
        call(question)  # type: ignore[operator]
        times.append((time.perf_counter() - began) * 1000)
    return {"p50_ms": float(np.percentile(times, 50)), "p95_ms": float(np.percentile(times, 95)),
            "mean_ms": float(np.mean(times))}  # fmt: skip


@contextmanager
def serial_search() -> Iterator[None]:
    """Searches on one thread: the parallel paths' thresholds out of reach."""
    saved = sqlite_store.PARALLEL_READS_MIN_ROWS, sqlite_queries.BM25_SPLIT_MIN_ROWS
    sqlite_store.PARALLEL_READS_MIN_ROWS = sqlite_queries.BM25_SPLIT_MIN_ROWS = 2**62
    try:
        yield
    finally:
        sqlite_store.PARALLEL_READS_MIN_ROWS, sqlite_queries.BM25_SPLIT_MIN_ROWS = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--data", type=Path, default=Path("../shared/benchmarks"))
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="hybrid,vector")
    parser.add_argument("--serial-too", action="store_true")
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args()
    questions = questions_of(args.data, args.queries)
    model = resolve_embedder("local")
    model.embed_query("warm up the model")
    settings = Settings(db=Path(args.db), cache_dir=None, embedder="local")
    out: dict[str, object] = {"db": args.db, "queries": len(questions),
                              "load_start": list(os.getloadavg())}  # fmt: skip
    with recalld.open(settings=settings, embedder=model) as engine:
        began = time.perf_counter()
        engine.search(questions[0], limit=10, mode="vector")
        out["first_search_s"] = time.perf_counter() - began
        for question in questions:  # untimed: the first pass reads the index pages from disk
            engine.search(question, limit=10)
        rounds = []
        for _ in range(args.rounds):
            one: dict[str, object] = {}
            for mode in args.modes.split(","):
                one[mode] = timed(questions, lambda q, m=mode: engine.search(q, limit=10, mode=m))
            if args.serial_too:
                with serial_search():
                    one["hybrid_serial"] = timed(questions,
                                                 lambda q: engine.search(q, limit=10))  # fmt: skip
            one["embed"] = timed(questions, model.embed_query)
            rounds.append(one)
        out["rounds"] = rounds
        if args.profile is not None:
            profiler = cProfile.Profile()
            profiler.enable()
            for question in questions:
                engine.search(question, limit=10, mode="hybrid")
            profiler.disable()
            profiler.dump_stats(str(args.profile))
    out["load_end"] = list(os.getloadavg())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
