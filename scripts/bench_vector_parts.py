"""Where a large SQLite store's vector CPU goes, part by part (an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_vector_parts.py --store STORE.db \\
        [--questions 100] [--rounds 2] [--data ../shared/benchmarks] [--out report.json]

The store is one ``recalld bench scale`` built (past 50,000 memories, with its ANN index and
vectors file). One engine answers the scale corpus's real questions (the bench's sample)
once untimed, then ``--rounds`` times while the functions named in :data:`PARTS` are timed
by the CPU of the thread that runs them (``time.thread_time``; the word channels may run on
a second thread). Each part is reported under the vector search that called it (the
default search's channel, the search from the top hit's vector, a time window's) and as
milliseconds a search, calls a search and milliseconds a call; parts nest. Run the same
command on two versions of the code (``PYTHONPATH``), alternated, to compare them.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import recalld
from recalld.bench.report import print_json
from recalld.bench.scale_worker import question_sample
from recalld.config import Settings
from recalld.providers.embedders import resolve_embedder
from recalld.retrieval import candidates
from recalld.retrieval.channels import semantic
from recalld.stores.sqlite import lazy_vectors, store, vector_file, vector_index, vector_reads

PARTS: list[tuple[Any, str, str]] = [
    (vector_reads, "listed_pks", "rows hidden or kept, listed (SQL)"),
    (vector_reads.VectorReads, "lazy_index", "the index's freshness (SQL)"),
    (vector_index.AnnIndex, "candidates", "graph walk"),
    (lazy_vectors.LazyAnn, "_pool", "candidates' vectors from the file"),
    (lazy_vectors.LazyAnn, "_best", "exact cosines, order, memory ids"),
    (vector_file.VectorCopies, "ids_of", "memory ids from the file"),
    (vector_reads, "_ties_by_id", "ties by id"),
    (vector_reads, "ranked", "ranked candidates"),
    (semantic, "completed", "completion's merge"),
    (store.SQLiteStore, "vectors_for", "vectors read by id"),
]
"""(owner, function, label) of each part timed inside a search."""


Tag = Callable[[tuple[Any, ...]], str]


def timed(owner: Any, name: str, label: str, totals: dict[str, float], calls: Counter[str],
          where: threading.local, tag: Tag | None = None) -> None:  # fmt: skip
    """Wrap ``owner.name`` so its thread CPU adds to ``totals`` under the caller's tag (or
    the one ``tag`` gives the call, for the calls inside it)."""
    wrapped = getattr(owner, name)

    def timing(*args: Any, **kwargs: Any) -> Any:
        outer = getattr(where, "tag", "")
        where.tag = tag(args) if tag else outer
        key = f"{where.tag}: {label}" if where.tag else label
        started = time.thread_time()
        try:
            return wrapped(*args, **kwargs)
        finally:
            totals[key] += time.thread_time() - started
            calls[key] += 1
            where.tag = outer

    setattr(owner, name, timing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data", default="../shared/benchmarks")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    totals: dict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    where = threading.local()
    reads = vector_reads.VectorReads
    kinds: list[tuple[Any, str, Tag]] = [
        (reads, "semantic", lambda a: "top hit's vector" if a[1].near_memory else "channel"),
        (reads, "window_semantic", lambda a: "time window"),
        (candidates, "complete_vectors", lambda a: "vector completion"),
    ]
    for owner, name, tag in kinds:
        timed(owner, name, "all", totals, calls, where, tag)
    for owner, name, label in PARTS:
        timed(owner, name, label, totals, calls, where)
    questions = question_sample(Path(args.data), args.questions, 7)
    settings = Settings(db=args.store, cache_dir=None, embedder="local")
    with recalld.open(settings=settings, embedder=resolve_embedder("local")) as engine:
        for question in questions:
            engine.search(question, limit=10)
        totals.clear()
        calls.clear()
        began = time.process_time()
        for _ in range(args.rounds):
            for question in questions:
                engine.search(question, limit=10)
        searches = args.rounds * len(questions)
        cpu = (time.process_time() - began) * 1000 / searches
    parts = {
        key: {
            "ms_a_search": round(totals[key] * 1000 / searches, 3),
            "calls_a_search": round(calls[key] / searches, 2),
            "ms_a_call": round(totals[key] * 1000 / calls[key], 3),
        }
        for key in sorted(totals)
    }
    report = {"store": args.store, "searches": searches, "process_cpu_ms": round(cpu, 2),
              "parts": parts}  # fmt: skip
    print_json(report, args.out)


if __name__ == "__main__":
    main()
