"""What pools sized for ``stable_limit`` results cost a default search (limit 10) on
LongMemEval_S stores, against pools sized for the limit alone, in alternating rounds of
the same process (so both see the same load).

    PYTHONPATH=src .venv/bin/python scripts/bench_limit_latency.py \
        [--file ../shared/benchmarks/longmemeval/longmemeval_s.json.gz] [--questions 10]
        [--rounds 3] [--cache-dir /tmp/benchcache]

Each question's haystack is stored through ``add_many`` (as ``recalld bench longmemeval``
does), then its question is searched with limit 10 by each variant, one round after the
other. Prints one JSON object: p50 / p95 ms per variant and their ratio, the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from lme_probes import warm_probes

from recalld.retrieval.config import BALANCED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--file", default="../shared/benchmarks/longmemeval/longmemeval_s.json.gz")
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/benchcache"))
    args = parser.parse_args()
    variants = {"stable pools (default)": BALANCED,
                "pools sized for the limit": BALANCED.with_changes(stable_limit=1)}  # fmt: skip
    timings: dict[str, list[float]] = {name: [] for name in variants}
    load_before = os.getloadavg()
    questions = 0
    for engine, probe in warm_probes(args.file, args.questions, args.cache_dir):
        questions += 1
        for _ in range(args.rounds):
            for name, config in variants.items():
                clock = time.perf_counter()
                engine.search(probe.question, limit=10, as_of=probe.as_of, config=config)
                timings[name].append((time.perf_counter() - clock) * 1000)
    summary = {
        name: {"p50_ms": float(np.percentile(t, 50)), "p95_ms": float(np.percentile(t, 95)),
               "searches": len(t)}
        for name, t in timings.items()
    }  # fmt: skip
    first, second = (summary[n]["p50_ms"] for n in variants)
    print(json.dumps({"file": args.file, "questions": questions, "rounds": args.rounds,
                      "variants": summary, "p50_ratio": first / second,
                      "load_average": {"start": load_before, "end": os.getloadavg()}},
                     indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
