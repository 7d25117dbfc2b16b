"""Core figures through the facade: ingest rate and search latency at 10k memories.

Ingest embeds every memory with the real packaged model (embedding cache disabled) through
``engine.add_many``; search times ``engine.search`` (query embedding included) per mode.
The memories are real snippets (1-3 sentences) of LongMemEval_S and LoCoMo turns, the
queries real questions of both (see recalld.bench.scale_corpus).

    PYTHONPATH=src python scripts/bench_core.py --count 10000 --queries 50

Prints a Markdown table (and the JSON with --json). Each run ingests into a fresh store in
--workdir; `--search-only` re-times searches on the store the last run left, for a second
measurement when the machine is quieter.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

import recalld
from recalld.bench import scale_corpus as sc
from recalld.config import Settings
from recalld.providers.embedders import resolve_embedder


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def percentiles(ms: list[float]) -> dict[str, float]:
    arr = np.array(ms)
    return {"p50_ms": float(np.percentile(arr, 50)), "p95_ms": float(np.percentile(arr, 95)),
            "mean_ms": float(arr.mean())}  # fmt: skip


def ingest(engine: recalld.MemoryEngine, texts: list[str]) -> dict:
    items = [recalld.NewMemory(content=t, type="turn", session_id=f"core-{i // 20}")
             for i, t in enumerate(texts)]  # fmt: skip
    before = load()
    started = time.perf_counter()
    results = engine.add_many(items)
    elapsed = time.perf_counter() - started
    created = sum(r.created for r in results)
    return {"memories": created, "seconds": elapsed, "per_second": created / elapsed,
            "mean_chars": float(np.mean([len(t) for t in texts])),
            "load_before": before, "load_after": load()}  # fmt: skip


def searches(engine: recalld.MemoryEngine, questions: list[str], limit: int) -> dict:
    engine.search(questions[0], limit=limit, mode="vector")  # loads vectors and the model
    out: dict = {"load_before": load()}
    for mode in ("vector", "hybrid"):
        times = []
        for question in questions:
            started = time.perf_counter()
            engine.search(question, limit=limit, mode=mode)
            times.append((time.perf_counter() - started) * 1000)
        out[mode] = percentiles(times)
    out["load_after"] = load()
    return out


def table(report: dict) -> str:
    ing, found = report.get("ingest"), report["search"]
    rate = f"{ing['per_second']:.1f}" if ing else "(not re-run)"
    seconds = f"{ing['seconds']:.0f}" if ing else "-"
    return "\n".join([
        "| memories | ingest s | ingest memories/s | vector p50 / p95 ms | hybrid p50 / p95 ms |"
        " load (1 min) during ingest / search |",
        "|---:|---:|---:|---:|---:|---|",
        f"| {report['count']:,} | {seconds} | {rate} "
        f"| {found['vector']['p50_ms']:.1f} / {found['vector']['p95_ms']:.1f} "
        f"| {found['hybrid']['p50_ms']:.1f} / {found['hybrid']['p95_ms']:.1f} "
        f"| {ing['load_after'][0] if ing else '-'} / {found['load_after'][0]} |",
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", default="../shared/benchmarks")
    parser.add_argument("--workdir", default="/tmp/recalld-bench-core")
    parser.add_argument("--search-only", action="store_true")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    source = sc.read_sources(Path(args.data))
    rng = np.random.default_rng(args.seed)
    pieces = sc.snippets(source.turns)
    texts = [pieces[i] for i in rng.choice(len(pieces), args.count, replace=False)]
    questions = [source.questions[i] for i in rng.choice(len(source.questions), args.queries,
                                                         replace=False)]  # fmt: skip
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    db = work / f"core-{args.count}-{args.seed}.db"
    if not args.search_only:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    report: dict = {"count": args.count, "queries": args.queries, "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "date": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
    settings = Settings(db=db, cache_dir=None)
    with recalld.open(settings=settings, embedder=resolve_embedder("local")) as engine:
        if not args.search_only:
            report["ingest"] = ingest(engine, texts)
        report["search"] = searches(engine, questions, args.limit)
    print(table(report))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
