"""The scale bench's questions that search a time window, replayed warm in one process (an
experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_window_questions.py \\
        --store STORE.db [--questions 200] [--rounds 5] [--data ../shared/benchmarks] [--out F]

Searches every question of the sample once (limit 10) and keeps those whose
``window_semantic`` channel ran (the questions that name a time); then searches those
``--rounds`` times, explained. For each it reports the median of its ``candidates`` stage
(wall ms, ``details["stage_ms"]``) and of its ``window_semantic`` reader (wall ms and the
thread's CPU ms), and their top 10s (ids and scores) from the first pass, to compare two
versions of the code on the same store. Run it once per version with that version's
``src`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import recalld
from recalld.bench.scale_worker import bench_inputs, store_bench_options, write_report
from recalld.stores.asks import NearestAsk
from recalld.stores.sqlite import readers
from recalld.stores.sqlite.vector_reads import VectorReads


def main() -> None:
    args = store_bench_options(__doc__ or "", rounds=5).parse_args()
    questions, model, settings = bench_inputs(args)
    timed: list[tuple[float, float]] = []
    reading = VectorReads.window_semantic

    def window_semantic(self: VectorReads, ask: NearestAsk, scope: readers.Scope) -> Any:
        began, used = time.perf_counter(), time.thread_time()
        try:
            return reading(self, ask, scope)
        finally:
            timed.append(((time.perf_counter() - began) * 1e3, (time.thread_time() - used) * 1e3))

    VectorReads.window_semantic = window_semantic  # type: ignore[method-assign]
    engine = recalld.open(settings=settings, embedder=model)
    tops: dict[str, list[tuple[str, float]]] = {}
    for question in questions:
        timed.clear()
        hits = engine.search(question, limit=10).hits
        if timed:
            tops[question] = [(h.memory.id, h.score) for h in hits]
    seen: dict[str, dict[str, list[float]]] = {q: {} for q in tops}
    for _ in range(args.rounds):
        for question in tops:
            timed.clear()
            stages = engine.search(question, limit=10, explain=True).details["stage_ms"]
            for name, value in (
                ("candidates_ms", stages["candidates"]),
                ("window_ms", sum(wall for wall, _ in timed)),
                ("window_cpu_ms", sum(cpu for _, cpu in timed)),
            ):
                seen[question].setdefault(name, []).append(value)
    medians = {q: {k: statistics.median(v) for k, v in got.items()} for q, got in seen.items()}
    write_report({"load": os.getloadavg()[0], "questions": medians, "tops": tops}, args.out)


if __name__ == "__main__":
    main()
