"""Preselection's effect on a large store's filtered vector searches, in one run (an
experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_preselect.py --store STORE.db \\
        [--questions 200] [--rounds 2] [--data ../shared/benchmarks] [--out report.json]

The store is one ``recalld bench scale`` built (past 50,000 memories, with its ANN index). The
same real questions go through one engine twice each, alternating: with preselection (a
filtered subset searched exactly is first ranked by the index's int8 copies, and only the
best few are read back) and without it (every row of the subset read back and scored).
A first untimed pass over the questions reads the store's pages they touch, so that neither
way pays for the other's cold reads. Reports p50 / p95 / mean ms of a default hybrid search (limit 10) for each, the questions
whose search preselected, their times both ways, and whether the top 10s differ.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

import recalld
from recalld.bench.scale_worker import (
    latency_ms,
    question_sample,
    store_bench_options,
    write_report,
)
from recalld.config import Settings
from recalld.providers.embedders import resolve_embedder
from recalld.stores.sqlite import lazy_vectors

OFF = 10**9
"""A factor no subset reaches: every row is read back, as before preselection."""


def main() -> None:
    parser = store_bench_options(__doc__.splitlines()[0], rounds=2)
    args = parser.parse_args()
    sample = question_sample(args.data, args.questions, args.seed)
    model = resolve_embedder("local")
    model.embed_query("warm up the model")
    engine = recalld.open(settings=Settings(db=args.store, cache_dir=None, embedder="local"),
                          embedder=model)  # fmt: skip
    factors = {"preselect": lazy_vectors.PRESELECT_FACTOR, "read_all": OFF}
    chose: list[int] = []
    preselected = lazy_vectors.LazyAnn._preselected

    def counting(self: Any, keep: Any, query: Any, limit: int) -> Any:
        if len(keep) > lazy_vectors.PRESELECT_FACTOR * limit:
            chose.append(len(keep))
        return preselected(self, keep, query, limit)

    lazy_vectors.LazyAnn._preselected = counting  # type: ignore[method-assign]
    for question in sample:  # every page the questions touch read once, before timing
        engine.search(question, limit=10)
    times: dict[str, list[float]] = {name: [] for name in factors}
    tops: dict[str, dict[str, list[str]]] = {name: {} for name in factors}
    filtered: dict[str, int] = {}
    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        order = list(factors) if round_ % 2 == 0 else list(reversed(factors))
        for question in sample:
            for name in order:
                lazy_vectors.PRESELECT_FACTOR = factors[name]
                chose.clear()
                began = time.perf_counter()
                found = engine.search(question, limit=10)
                times[name].append((time.perf_counter() - began) * 1000)
                tops[name][question] = [h.memory.id for h in found.hits]
                if chose:
                    filtered[question] = max(chose)
    lazy_vectors.PRESELECT_FACTOR = factors["preselect"]
    count = len(sample)
    differ = sum(tops["preselect"][q] != tops["read_all"][q] for q in sample)
    per_question = [
        {"question": q[:60], "subset_rows": rows,
         **{name: round(min(times[name][i], times[name][i + count]) if args.rounds > 1
                        else times[name][i], 1) for name in factors}}  # fmt: skip
        for i, q in enumerate(sample) if (rows := filtered.get(q)) is not None
    ]  # fmt: skip
    report = {"store": str(args.store), "questions": count, "rounds": args.rounds,
              "date": datetime.now(UTC).isoformat(timespec="minutes"),
              "load_before": load_before, "load_after": os.getloadavg(),
              **{name: latency_ms(found) for name, found in times.items()},
              "preselected_questions": per_question,
              "top10_differs": differ}  # fmt: skip
    write_report(report, args.out)


if __name__ == "__main__":
    main()
