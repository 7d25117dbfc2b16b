"""The PostgreSQL word channel over word postings with and without its early stop, in one
process, alternating question by question (not a test).

    PYTHONPATH=src .venv/bin/python scripts/postgres_word_topk.py --db DSN \\
        [--tenant default] [--queries 200] [--data ../shared/benchmarks] [--json OUT.json]

``--db`` is a store whose tenant has word postings (``recalld postgres word-index``), such
as the database ``recalld_scale_100000`` that ``recalld bench scale --sizes 100k --backends
postgres`` builds (its word postings come with it). Each question of the scale bench's
sources is asked of the word channel alone, at the limit of a default search, three ways:
the early stop (``queries.WORD_DEPTH_FACTOR`` as set), every posting summed
(``WORD_DEPTH_FACTOR = 0``: the channel before the early stop) and every matching row read
from the table (no postings: the exact channel). Prints p50 / p95 ms of each, how many
lists equal the exact one (whole and top 10), how often the early stop proved its top k,
and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from recalld.bench import scale_corpus as sc
from recalld.lexical import phrases
from recalld.retrieval.channels import Need
from recalld.retrieval.channels import request as channel_request
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.pipeline import SearchRequest, pool_size
from recalld.retrieval.query import understand
from recalld.stores.base import CandidateRequest, Tenancy
from recalld.stores.postgres import PostgresStore
from recalld.stores.postgres import queries as q

MODES = ("early_stop", "every_posting", "every_row")


def proven(store: PostgresStore, request: CandidateRequest) -> bool:
    """Whether the early stop proved ``request``'s top k."""
    ask: Any = request.asks["bm25"]
    where, params = q.filter_sql(request.filters, store._visible, store._own_index)
    ctes, more = q.top_words_ctes(phrases(ask.terms), where, store._visible[0])
    if not any(c.startswith("lex_early") for c in ctes):
        return False
    with store._read() as conn:
        found = conn.execute(f"WITH {', '.join(ctes)} SELECT proven FROM lex_early",
                             {**params, **more, "bm25_limit": ask.limit}).fetchone()  # fmt: skip
    return bool(found and found[0])


def run(store: PostgresStore, requests: list[CandidateRequest], depth: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {m: [] for m in MODES}
    found: dict[str, list[list[tuple[str, float]]]] = {m: [] for m in MODES}
    for i, request in enumerate(requests):
        order = MODES[i % 3 :] + MODES[: i % 3]  # each mode first as often
        for mode in order:
            store._word_postings = mode != "every_row"
            q.WORD_DEPTH_FACTOR = depth if mode == "early_stop" else 0
            began = time.perf_counter()
            rows = store.candidates(request).get("bm25", [])
            times[mode].append((time.perf_counter() - began) * 1000)
            found[mode].append([(c.memory_id, c.score) for c in rows])
    store._word_postings = True
    q.WORD_DEPTH_FACTOR = depth
    exact = found["every_row"]

    def same(mode: str, top: int | None) -> int:
        return sum(a[:top] == b[:top] for a, b in zip(found[mode], exact, strict=True))

    return {
        "ms": {m: {"p50": float(np.percentile(t, 50)), "p95": float(np.percentile(t, 95)),
                   "mean": float(np.mean(t))} for m, t in times.items()},
        "equal_to_exact": {m: {"whole_list": same(m, None), "top10": same(m, 10)}
                           for m in ("early_stop", "every_posting")},
        "proven": sum(proven(store, r) for r in requests),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="DSN of a store with word postings")
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--depths", default=str(q.WORD_DEPTH_FACTOR),
                        help="WORD_DEPTH_FACTOR values to try, comma separated")  # fmt: skip
    parser.add_argument("--data", type=Path, default=Path("../shared/benchmarks"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    source = sc.read_sources(args.data)
    rng = np.random.default_rng(args.seed)
    picked = rng.choice(len(source.questions), args.queries, replace=False)
    questions = [source.questions[i] for i in sorted(picked)]
    limit = pool_size(SearchRequest(query="", limit=10), RetrievalConfig())
    now = datetime.now(UTC)
    requests = [channel_request(Need({"bm25": limit}, understand(t, "hybrid", now).terms, t))
                for t in questions]  # fmt: skip
    store = PostgresStore(args.db, Tenancy(args.tenant))
    assert store._word_postings, "no word postings: recalld postgres word-index"
    load = os.getloadavg()
    for request in requests[:5]:  # warm the caches
        store.candidates(request)
    runs = {d: run(store, requests, int(d)) for d in args.depths.split(",")}
    store.close()
    report = {"db": store.path, "tenant": args.tenant, "queries": len(requests),
              "limit": limit, "runs": runs, "load_average": {"start": load,
              "end": os.getloadavg()}, "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())}  # fmt: skip
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
