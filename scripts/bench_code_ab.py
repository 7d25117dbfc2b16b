"""Two versions of the code on one large store, alternated in one run (an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_code_ab.py --store STORE.db \\
        --base main --new HEAD [--questions 200] [--pairs 3] [--data ../shared/benchmarks] \\
        [--out report.json]

``--base`` and ``--new`` are git revisions (extracted with ``git archive``) or folders holding
a ``src/``. Each round starts a fresh process per version, one after the other (base first
in even rounds, new first in odd ones), on the same store (one ``recalld bench scale``
built): an untimed pass over other questions (a sample of another seed, the timed ones left
out: it loads the model, the indexes and the pages most searches touch, and leaves nothing
a repeated question would find kept), a timed pass (default hybrid search, limit 10: wall
time and the process's CPU time per search, each question searched for the first time; its
top 10s are compared), then an explained pass over the same questions for each stage's
mean milliseconds (``details["stage_ms"]``: those are repeats). Prints p50 / p95 / mean /
CPU per version and their ratios, each stage's mean, the load average of each round, and
how many questions' top 10s (ids and scores) differ between the versions. On a shared
machine the ratios of one run mean more than the absolute figures.

Each pair's ratios are given too (``pair_ratios``), and for each figure in how many pairs the
new version was lower (``lower_in``): a change is resolved only where the pairs agree. The
same revision on both sides (100k store, 3 pairs, 2026-11-29, load 0.5-1.0) gave ratios of
0.919 (p50), 0.856 (p95) and 0.949 (CPU) over the three pairs together: differences of that
size are this machine's noise, not the code's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

CHILD = """
import json, os, statistics, sys, time
from pathlib import Path
import recalld
from recalld import heap
from recalld.config import Settings
from recalld.bench.scale_worker import question_sample
from recalld.providers.embedders import resolve_embedder
store, data, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
questions = question_sample(data, count, 7)
warm = [q for q in question_sample(data, count, 8) if q not in set(questions)]
engine = recalld.open(settings=Settings(db=store, cache_dir=None, embedder="local"),
                      embedder=resolve_embedder("local"))
for q in warm:
    engine.search(q, limit=10)
heap.settle()
wall, cpu, tops = [], [], {}
for q in questions:
    began, used = time.perf_counter(), time.process_time()
    hits = engine.search(q, limit=10).hits
    cpu.append((time.process_time() - used) * 1000)
    wall.append((time.perf_counter() - began) * 1000)
    tops[q] = [(h.memory.id, h.score) for h in hits]
stages = {}
for q in questions:
    for stage, ms in engine.search(q, limit=10, explain=True).details["stage_ms"].items():
        stages.setdefault(stage, []).append(ms)
wall.sort()
print(json.dumps({"p50": statistics.median(wall), "p95": wall[int(len(wall) * 0.95)],
    "mean": statistics.mean(wall), "cpu": statistics.mean(cpu), "load": os.getloadavg()[0],
    "stages": {s: sum(v) / len(questions) for s, v in stages.items()}, "tops": tops}))
"""
FIGURES = ("p50", "p95", "mean", "cpu")
SCORE_TOLERANCE = 1e-9
"""Scores closer than this are the same score (the same floats, printed and parsed)."""


def source_of(revision: str, into: Path) -> Path:
    """The ``src/`` of a folder, or of a git revision extracted under ``into``."""
    if (Path(revision) / "src").is_dir():
        return Path(revision) / "src"
    archive = subprocess.run(
        ["git", "archive", revision, "src"], check=True, capture_output=True
    ).stdout
    target = into / revision.replace("/", "_")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


def run_once(src: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, args.store, args.data, str(args.questions)],
        check=True, capture_output=True, text=True, env=env,
    ).stdout  # fmt: skip
    return dict(json.loads(out.strip().splitlines()[-1]))


def differing(a: dict[str, list[list[Any]]], b: dict[str, list[list[Any]]]) -> int:
    """Questions whose top 10 differ in ids, order or scores."""
    return sum(
        [i for i, _ in a[q]] != [i for i, _ in b[q]]
        or any(abs(x - y) > SCORE_TOLERANCE for (_, x), (_, y) in zip(a[q], b[q], strict=True))
        for q in a
    )


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    stages = {s for r in runs for s in r["stages"]}
    return {
        **{f: round(statistics.mean(r[f] for r in runs), 2) for f in FIGURES},
        "stages_ms": {
            s: round(statistics.mean(r["stages"].get(s, 0.0) for r in runs), 2) for s in stages
        },
        "load": [round(r["load"], 1) for r in runs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True)
    parser.add_argument("--base", default="main")
    parser.add_argument("--new", default="HEAD")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--data", default="../shared/benchmarks")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        sources = {side: source_of(getattr(args, side), Path(scratch)) for side in ("base", "new")}
        runs: dict[str, list[dict[str, Any]]] = {"base": [], "new": []}
        for pair in range(args.pairs):
            # ABBA: the first process of a run finds the files least cached (a 1M store's
            # first base process ran 1.2x slower than the next), so neither side always
            # goes first
            for side in ("base", "new") if pair % 2 == 0 else ("new", "base"):
                runs[side].append(run_once(sources[side], args))
    base, new = summary(runs["base"]), summary(runs["new"])
    report = {
        "store": args.store,
        "questions": args.questions,
        "pairs": args.pairs,
        "base": {"revision": args.base, **base},
        "new": {"revision": args.new, **new},
        "ratio": {f: round(new[f] / base[f], 3) for f in FIGURES},
        "pair_ratios": {
            f: [round(n[f] / b[f], 3) for b, n in zip(runs["base"], runs["new"], strict=True)]
            for f in FIGURES
        },
        "lower_in": {
            f: f"{sum(n[f] < b[f] for b, n in zip(runs['base'], runs['new'], strict=True))}"
            f" of {args.pairs}"
            for f in FIGURES
        },
        "top10_differs": differing(runs["base"][0]["tops"], runs["new"][0]["tops"]),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
