"""One mechanism of a large store's search, on and off, in one run (an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_ab.py --mechanism preselect \\
        --store STORE.db [--questions 200] [--rounds 2] [--data ../shared/benchmarks] \\
        [--out report.json]

The store is one ``recalld bench scale`` built (past 50,000 memories, with its ANN index).
The same real questions go through one engine with the mechanism on and off, alternating,
for ``--rounds`` rounds, after an untimed pass that reads the store's pages they touch (so
neither way pays for the other's cold reads). Mechanisms:

- ``preselect``: a filtered subset searched exactly is first ranked by the ANN index's int8
  copies and only the best few rows are read back (off: every row of the subset is);
- ``near-memory``: the search from a stored memory's vector for the memories near it
  (knowledge updates) caps its beam (off: the beam the index's size calls for).

Reports p50 / p95 / mean ms of a default hybrid search (limit 10) each way, the slowest
questions (the faster of their rounds, each way) and how many top 10s differ.
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
from recalld.stores.sqlite import lazy_vectors, vector_index

OFF = 10**9
"""A setting no search reaches: the mechanism never acts."""
MECHANISMS: dict[str, tuple[Any, str]] = {
    "preselect": (lazy_vectors, "PRESELECT_FACTOR"),
    "near-memory": (vector_index, "NEAR_MEMORY_EXPANSION"),
}
"""Each mechanism's module and setting."""


def main() -> None:
    parser = store_bench_options(__doc__.splitlines()[0], rounds=2)
    parser.add_argument("--mechanism", choices=sorted(MECHANISMS), required=True)
    args = parser.parse_args()
    sample = question_sample(args.data, args.questions, args.seed)
    model = resolve_embedder("local")
    model.embed_query("warm up the model")
    engine = recalld.open(settings=Settings(db=args.store, cache_dir=None, embedder="local"),
                          embedder=model)  # fmt: skip
    module, setting = MECHANISMS[args.mechanism]
    values = {"on": getattr(module, setting), "off": OFF}
    for question in sample:
        engine.search(question, limit=10)
    times: dict[str, list[float]] = {name: [] for name in values}
    tops: dict[str, dict[str, list[str]]] = {name: {} for name in values}
    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        order = list(values) if round_ % 2 == 0 else list(reversed(values))
        for question in sample:
            for name in order:
                setattr(module, setting, values[name])
                began = time.perf_counter()
                found = engine.search(question, limit=10)
                times[name].append((time.perf_counter() - began) * 1000)
                tops[name][question] = [h.memory.id for h in found.hits]
    setattr(module, setting, values["on"])
    count = len(sample)

    def best(name: str, i: int) -> float:
        return round(min(times[name][i::count]), 1)

    slowest = sorted(range(count), key=lambda i: -max(best("on", i), best("off", i)))[:10]
    differ = sum(tops["on"][q] != tops["off"][q] for q in sample)
    report = {"store": str(args.store), "mechanism": args.mechanism, "questions": count,
              "rounds": args.rounds, "date": datetime.now(UTC).isoformat(timespec="minutes"),
              "load_before": load_before, "load_after": os.getloadavg(),
              **{name: latency_ms(found) for name, found in times.items()},
              "slowest": [{"question": sample[i][:60], "on": best("on", i), "off": best("off", i)}
                          for i in slowest],
              "top10_differs": differ}  # fmt: skip
    write_report(report, args.out)


if __name__ == "__main__":
    main()
