"""Where a ``recalld serve`` worker's CPU goes under the load bench, by thread, with a
different number of search turns a worker (an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_serve_threads.py --store STORE.db \\
        [--turns 4,1] [--workers 2] [--clients 32] [--seconds 10] [--pairs 2] \\
        [--data ../shared/benchmarks] [--out report.json]

One ``recalld serve --workers N`` per value of ``--turns`` (``RECALLD_HTTP_SEARCH_CONCURRENCY``)
on the store, all up at once, their runs alternated; each run one client alone, then
``--clients`` sending freely (:func:`recalld.bench.load.measure`). For every run, from
``/proc`` of each worker process: the CPU a search of its event loop's thread (the main
thread), of all its other threads (the searches, on the thread pool), how many threads
used CPU, and how many threads the run started. Linux only; ticks of 10 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_load_client import questions

from recalld.bench import load
from recalld.bench.report import write_json


def tasks(pid: int) -> dict[tuple[int, int], float]:
    """CPU seconds of every thread of every worker of the server ``pid``, by (worker, tid)."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[tuple[int, int], float] = {}
    for worker in load._children(pid):
        for task in Path(f"/proc/{worker}/task").glob("*"):
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[(worker, int(task.name))] = (int(fields[11]) + int(fields[12])) / tick
    return found


def one(url: str, clients: int, seconds: float, asked: list[str]) -> dict[str, Any]:
    pid = load._serving[url]
    before = tasks(pid)
    row = load.measure(url, clients, seconds, asked)
    after = tasks(pid)
    searched = max(1, round(row["searches_per_s"] * row["seconds"]))
    used = {k: after[k] - before.get(k, 0.0) for k in after}
    loop = sum(v for (w, t), v in used.items() if w == t)
    rest = sum(v for (w, t), v in used.items() if w != t)
    return {
        "clients": clients,
        "searches_per_s": round(row["searches_per_s"], 1),
        "p50_ms": round(row["p50_ms"], 1),
        "p99_ms": round(row["p99_ms"], 1),
        "errors": row["errors"],
        "server_cpu_ms": round(row["server_cpu_ms_per_search"] or 0, 2),
        "loop_ms": round(loop * 1000 / searched, 2),
        "threads_ms": round(rest * 1000 / searched, 2),
        "client_cpu_ms": round(row["client_cpu_ms_per_search"] or 0, 2),
        "threads_busy": sum(1 for v in used.values() if v > 0),
        "threads_started": len(set(after) - set(before)),
        "per_worker": row["per_worker"],
        "load_avg": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--turns", default="4,1")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--alone-seconds", type=float, default=5.0)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--data", default="../shared/benchmarks")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    asked = questions(Path(args.data))
    turns = [int(t) for t in args.turns.split(",")]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        folder = Path(tmp)
        urls = {}
        for t in turns:
            env = load.server_env(
                args.store,
                "local",
                folder,
                RECALLD_CACHE_DIR=str(folder / "serve-cache"),
                RECALLD_HTTP_SEARCH_CONCURRENCY=str(t),
            )
            urls[t] = stack.enter_context(load.served(env, folder / f"s{t}.log", args.workers))
        for url in urls.values():
            load.warm(url, asked, workers=args.workers)
        for pair in range(1, args.pairs + 1):
            order = list(urls.items())
            for t, url in order if pair % 2 else order[::-1]:
                for clients, seconds in [(1, args.alone_seconds), (args.clients, args.seconds)]:
                    row = {"turns": t, "pair": pair, **one(url, clients, seconds, asked)}
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "store": args.store,
        "workers": args.workers,
        "clients": args.clients,
        "runs": runs,
    }
    if args.out:
        write_json(report, Path(args.out))


if __name__ == "__main__":
    sys.exit(main())
