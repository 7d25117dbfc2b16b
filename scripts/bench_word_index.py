"""The word index against FTS5 alone on a large store, in one run (an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_word_index.py --store STORE.db \\
        [--questions 200] [--rounds 3] [--data ../shared/benchmarks] [--out report.json]
        [--max-expansion BEAM]

The store is one ``recalld bench scale`` built (past 50,000 memories, with its word index
and ANN index). Two engines on it in one process: the default, and one whose store reads
FTS5 instead of the word index. The same real questions (the bench's sample) go through both,
interleaved, for ``--rounds`` rounds: p50 / p95 / mean ms of a default hybrid search, limit
10; and the word channel alone (the store's BM25 candidates, 200 deep). Then agreement: the
hybrid top 10 of each combination of word engine (index / FTS5) and vector engine (ANN /
exact) against exact search on both (``SQLiteStore.search_exactly``), so that the index's
part and the ANN's part of any difference are told apart.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import recalld
from recalld.bench.scale_worker import (
    agreement,
    bench_inputs,
    hybrid_tops,
    latency_ms,
    store_bench_options,
    write_report,
)
from recalld.config import Settings
from recalld.retrieval.channels import Need, request as channel_request
from recalld.retrieval.query import understand
from recalld.stores.sqlite import SQLiteStore, ann_beam


def main() -> None:
    parser = store_bench_options(__doc__.splitlines()[0], rounds=3)
    parser.add_argument("--max-expansion", type=int,
                        help="the ANN search's widest beam (default: the store's own, "
                        f"{ann_beam.MAX_EXPANSION})")  # fmt: skip
    args = parser.parse_args()
    if args.max_expansion:
        ann_beam.MAX_EXPANSION = args.max_expansion
    sample, model, settings = bench_inputs(args)
    report: dict[str, Any] = {
        "store": str(args.store), "questions": len(sample), "rounds": args.rounds,
        "max_expansion": ann_beam.MAX_EXPANSION,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg()},
    }  # fmt: skip
    report["word_channel"] = _word_channel(Path(args.store), sample, args.rounds)
    report["latency"] = _latency(settings, model, sample, args.rounds)
    report["agreement"] = _agreement(settings, model, sample)
    report["machine"]["load_after"] = os.getloadavg()
    write_report(report, args.out)


def _opened(settings: Settings, model: Any, words: bool, ann: bool = True) -> Any:
    engine = recalld.open(settings=settings, embedder=model)
    store = engine.store
    assert isinstance(store, SQLiteStore)
    store.search_exactly(words=not words, vectors=not ann)
    return engine


def _latency(settings: Settings, model: Any, sample: list[str], rounds: int) -> dict[str, Any]:
    engines = {"word index": _opened(settings, model, words=True),
               "fts5": _opened(settings, model, words=False)}  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in engines}
    for engine in engines.values():
        for question in sample[:20]:  # warm: the ANN index, the word index, the page cache
            engine.search(question, limit=10, mode="hybrid")
    for _ in range(rounds):
        for question in sample:
            for name, engine in engines.items():
                started = time.perf_counter()
                engine.search(question, limit=10, mode="hybrid")
                times[name].append((time.perf_counter() - started) * 1000)
    for engine in engines.values():
        engine.close()
    return {name: latency_ms(t) for name, t in times.items()}


def _word_channel(path: Path, sample: list[str], rounds: int) -> dict[str, Any]:
    """The word channel alone (the store's ``candidates``, BM25 only, 200 deep as the
    default search asks), both ways, interleaved."""
    now = datetime.now(UTC)
    requests = [channel_request(Need({"bm25": 200}, terms, q))
                for q in sample if (terms := understand(q, "hybrid", now).terms)]  # fmt: skip
    stores = {"word index": SQLiteStore(path), "fts5": SQLiteStore(path)}
    stores["fts5"].search_exactly(words=True, vectors=False)
    times: dict[str, list[float]] = {name: [] for name in stores}
    for _ in range(rounds):
        for request in requests:
            for name, store in stores.items():
                started = time.perf_counter()
                store.candidates(request)
                times[name].append((time.perf_counter() - started) * 1000)
    for store in stores.values():
        store.close()
    return {name: {**latency_ms(t), "questions": len(requests)} for name, t in times.items()}


def _agreement(settings: Settings, model: Any, sample: list[str]) -> dict[str, Any]:
    def tops(engine: Any) -> list[list[str]]:
        with engine:
            return hybrid_tops(engine, sample, 10)

    exact = tops(_opened(settings, model, words=False, ann=False))
    out: dict[str, Any] = {}
    for label, words, ann in (("word index + ANN", True, True), ("FTS5 + ANN", False, True),
                              ("word index + exact vectors", True, False)):  # fmt: skip
        out[label] = agreement(tops(_opened(settings, model, words=words, ann=ann)), exact)
    return out


if __name__ == "__main__":
    main()
