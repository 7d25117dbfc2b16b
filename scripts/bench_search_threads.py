"""CPU a search costs in one process when 1, 2 or 4 threads search at once (an experiment,
not a test): what the turns of one ``recalld serve`` worker cost each other.

    PYTHONPATH=src .venv/bin/python scripts/bench_search_threads.py --store STORE.db \\
        [--rounds 4] [--searches 80] [--threads 1,2,4] [--data ../shared/benchmarks]

``--store`` a store ``recalld bench scale`` built (its 50 questions, chosen as the load bench
chooses them). One engine, warmed by 20 searches; each round runs ``--searches`` searches
split over each thread count in turn (the order reversed every other round), and prints the
process's CPU a search and the wall time a search.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

from bench_load_client import questions

import recalld
from recalld import heap
from recalld.config import Settings
from recalld.providers.embedders import resolve_embedder
from recalld.requests import SearchQuery


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--searches", type=int, default=80)
    parser.add_argument("--threads", default="1,2,4")
    parser.add_argument("--data", default="../shared/benchmarks")
    args = parser.parse_args()
    asked = questions(Path(args.data))
    counts = [int(n) for n in args.threads.split(",")]
    model = resolve_embedder("local")
    settings = Settings(db=Path(args.store), cache_dir=None, embedder="local")
    requests = [SearchQuery.model_validate({"query": q, "limit": 10}) for q in asked]
    with recalld.open(settings=settings, embedder=model) as engine:
        for request in requests[:20]:
            engine.run_search(request)
        heap.settle()

        def run(threads: int) -> tuple[float, float]:
            each = args.searches // threads

            def body(n: int) -> None:
                for i in range(each):
                    engine.run_search(requests[(n * 31 + i) % len(requests)])

            cpu, wall = time.process_time(), time.perf_counter()
            started = [threading.Thread(target=body, args=(n,)) for n in range(threads)]
            for thread in started:
                thread.start()
            for thread in started:
                thread.join()
            done = threads * each
            return (
                (time.process_time() - cpu) * 1000 / done,
                (time.perf_counter() - wall) * 1000 / done,
            )

        for turn in range(args.rounds):
            for threads in counts if turn % 2 == 0 else counts[::-1]:
                cpu, wall = run(threads)
                print(
                    f"round {turn + 1} threads {threads}: CPU {cpu:.2f} ms a search, "
                    f"wall {wall:.2f} ms a search, load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    sys.exit(main())
