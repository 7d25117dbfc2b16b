"""How many of a large store's default hybrid top 10s are those of exact search (an
experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/exact_agreement.py --store STORE.db \\
        [--questions 150] [--exact exact.json] [--out tops.json]

Searches the scale corpus's real questions (the bench's sample, seed 7) on the store as it
is (word index, ANN index), then, unless ``--exact`` names the saved answers of an earlier
run, again with ``search_exactly`` (FTS5 over every matching row, cosine over the whole
matrix), and prints how many top 10s are the same list, the same set and the same top hit,
as ``recalld bench scale`` does. Run it with another ``PYTHONPATH`` to measure other code on
the same exact answers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import recalld
from recalld.bench.scale_worker import agreement, hybrid_tops, question_sample
from recalld.config import Settings
from recalld.providers.embedders import resolve_embedder
from recalld.stores.sqlite import SQLiteStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True)
    parser.add_argument("--questions", type=int, default=150)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", default="../shared/benchmarks", type=Path)
    parser.add_argument("--exact", type=Path, help="exact tops saved by an earlier run")
    parser.add_argument("--out", type=Path, help="where to save the tops (and exact ones)")
    args = parser.parse_args()
    questions = question_sample(args.data, args.questions, args.seed)
    model = resolve_embedder("local")
    settings = Settings(db=args.store, cache_dir=None, embedder="local")
    with recalld.open(settings=settings, embedder=model) as engine:
        tops = hybrid_tops(engine, questions, 10)
    if args.exact and args.exact.exists():
        exact = json.loads(args.exact.read_text())["exact"]
    else:
        with recalld.open(settings=settings, embedder=model) as engine:
            assert isinstance(engine.store, SQLiteStore)
            engine.store.search_exactly()
            exact = hybrid_tops(engine, questions, 10)
    result = agreement(tops, exact)
    differing = [i for i, (a, b) in enumerate(zip(tops, exact, strict=True)) if a != b]
    print(json.dumps({"questions": len(questions), **result, "differing": differing}))
    if args.out:
        args.out.write_text(json.dumps({"tops": tops, "exact": exact}) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
