"""Measure a reranker against the default pipeline on one benchmark, in one run.

Both systems answer every question on the same stores, so their quality and latency are
compared on equal terms (the latency ratio is what to read on a shared machine):
``recalld`` is the default ``balanced`` pipeline (``rerank_depth=0``: stage 5 off, the
zero-LLM ranking), ``recalld+RERANKER`` the same with stage 5 on.

    python scripts/bench_rerank.py locomo ../shared/benchmarks/locomo/locomo.json \\
        --reranker maxsim --out docs/reports/rerank-maxsim-locomo.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from recalld.bench.report import write_json
from recalld.bench.runner import run_locomo, run_longmemeval
from recalld.config import load_settings
from recalld.retrieval.config import BALANCED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("benchmark", choices=["longmemeval", "locomo", "workloads"])
    parser.add_argument("file", type=Path)
    parser.add_argument("--reranker", default="maxsim")
    parser.add_argument("--limit", type=int, help="first N questions / conversations")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    settings = load_settings({"reranker": args.reranker})
    configs = {"recalld": BALANCED.with_changes(rerank_depth=0),
               f"recalld+{args.reranker.split(':')[0]}": BALANCED}  # fmt: skip
    runner = {"longmemeval": run_longmemeval, "locomo": run_locomo}.get(args.benchmark)
    extra: dict[str, object] = {"budgets": ()}
    if runner is None:  # recalld bench workloads: its runner takes no budgets
        from recalld.bench.workloads_run import run_workloads

        runner, extra = run_workloads, {}
    done = [0]

    def progress(step: int, total: int, label: str) -> None:
        done[0] += step
        if done[0] % 50 == 0 or done[0] == total:
            print(f"{args.benchmark}: {done[0]}/{total}", file=sys.stderr, flush=True)

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report = runner(args.file, configs=configs, baselines=False, limit=args.limit,
                    settings=settings, progress=progress, **extra)  # fmt: skip
    report = {"command": " ".join(["python", *sys.argv]), "started": started,
              "load_average": os.getloadavg(), **report}  # fmt: skip
    write_json(report, args.out)
    systems = report.get("systems", {})
    print(json.dumps({n: {k: v for k, v in s.items() if k in ("overall", "latency_ms")}
                      for n, s in systems.items()}, indent=1)[:4000])  # fmt: skip


if __name__ == "__main__":
    main()
