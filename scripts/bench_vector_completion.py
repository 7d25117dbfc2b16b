"""Vector completion's cost on a large store, in one run (an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_vector_completion.py --store STORE.db \\
        [--questions 200] [--rounds 2] [--data ../shared/benchmarks] [--out report.json]

The store is one ``recalld bench scale`` built (past 50,000 memories, with its ANN index).
Two engines on it in one process: the default, and one whose store says it scores every
vector (so vector completion stands aside). The same real questions go through both,
alternating, for ``--rounds`` rounds: p50 / p95 / mean ms of a default hybrid search, limit 10.
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


def main() -> None:
    parser = store_bench_options(__doc__.splitlines()[0], rounds=2)
    args = parser.parse_args()
    sample = question_sample(args.data, args.questions, args.seed)
    model = resolve_embedder("local")
    model.embed_query("warm up the model")
    settings = Settings(db=args.store, cache_dir=None, embedder="local")
    engines: dict[str, Any] = {
        name: recalld.open(settings=settings, embedder=model) for name in ("completion", "without")
    }
    engines["without"].store.exact_vectors = lambda: True  # it stands aside
    for question in sample[:10]:
        for engine in engines.values():
            engine.search(question, limit=10)
    times: dict[str, list[float]] = {name: [] for name in engines}
    load_before = os.getloadavg()
    for round_ in range(args.rounds):
        order = list(engines) if round_ % 2 == 0 else list(reversed(engines))
        for question in sample:
            for name in order:
                began = time.perf_counter()
                engines[name].search(question, limit=10)
                times[name].append((time.perf_counter() - began) * 1000)
    report = {"store": str(args.store), "questions": len(sample), "rounds": args.rounds,
              "date": datetime.now(UTC).isoformat(timespec="minutes"),
              "load_before": load_before, "load_after": os.getloadavg(),
              **{name: latency_ms(found) for name, found in times.items()}}  # fmt: skip
    write_report(report, args.out)


if __name__ == "__main__":
    main()
