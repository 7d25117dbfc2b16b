"""A default search (limit 10) on LongMemEval_S stores, this checkout against another one, in
alternating processes so that load hits both alike (not a test).

    git worktree add /tmp/before ff2971e
    PYTHONPATH=src .venv/bin/python scripts/bench_commit_latency.py --against /tmp/before/src \\
        [--questions 12] [--repeats 5] [--rounds 3] [--cache-dir /tmp/benchcache]

Each round runs one process per checkout (``PYTHONPATH`` set to its ``src``): it stores the
haystack of each of the first ``questions`` LongMemEval_S questions through ``add_many``,
searches the question once untimed, then ``repeats`` times timed. Prints one JSON object:
p50 / p95 / mean ms per checkout over all rounds, each round's p50, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
SRC = HERE.parents[1] / "src"
DATA = "../shared/benchmarks/longmemeval/longmemeval_s.json.gz"


def child(args: argparse.Namespace) -> None:
    """Time the searches with whatever ``recalld`` this process imports; print the times."""
    from lme_probes import warm_probes

    import recalld

    times = []
    for engine, probe in warm_probes(args.file, args.questions, args.cache_dir):
        for _ in range(args.repeats):
            clock = time.perf_counter()
            engine.search(probe.question, limit=10, as_of=probe.as_of)
            times.append((time.perf_counter() - clock) * 1000)
    print(json.dumps({"module": recalld.__file__, "times_ms": times}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="the other checkout's src folder")
    parser.add_argument("--file", default=DATA)
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/benchcache"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.against is None:
        parser.error("--against is required")
    sources = {"this checkout": SRC, "against": args.against.resolve()}
    runs: dict[str, list[list[float]]] = {name: [] for name in sources}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, src in sources.items():
            env = {**os.environ, "PYTHONPATH": str(src)}
            argv = [sys.executable, str(HERE), "--child", "--file", str(args.file),
                    "--questions", str(args.questions), "--repeats", str(args.repeats),
                    "--cache-dir", str(args.cache_dir)]  # fmt: skip
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
            found = json.loads(done.stdout.strip().splitlines()[-1])
            if not found["module"].startswith(str(src)):
                raise SystemExit(f"{name}: imported {found['module']}, not {src}")
            runs[name].append(found["times_ms"])
    summary = {}
    for name, rounds in runs.items():
        every = [t for r in rounds for t in r]
        summary[name] = {"src": str(sources[name]), "searches": len(every),
                         "p50_ms": float(np.percentile(every, 50)),
                         "p95_ms": float(np.percentile(every, 95)),
                         "mean_ms": statistics.mean(every),
                         "round_p50_ms": [float(np.percentile(r, 50)) for r in rounds]}  # fmt: skip
    mine, other = summary["this checkout"], summary["against"]
    print(json.dumps({
        "questions": args.questions, "repeats": args.repeats, "rounds": args.rounds,
        "checkouts": summary,
        "ratio": {k: mine[k] / other[k] for k in ("p50_ms", "p95_ms", "mean_ms")},
        "load_average": {"start": load_before, "end": os.getloadavg()},
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
