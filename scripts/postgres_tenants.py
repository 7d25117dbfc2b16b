"""PostgreSQL with many tenants in one database: what a tenant's search costs, and the vector
channel's recall under the tenant filter (not a test).

    PYTHONPATH=src .venv/bin/python scripts/postgres_tenants.py --admin DSN \\
        [--size 1000000] [--tenants 1000] [--big 100000] [--queries 50] \\
        [--data ../shared/benchmarks] [--workdir /tmp/scale] [--rebuild] [--json OUT.json] \\
        [--database NAME]

It builds, in the database ``recalld_scale_tenants_<size>_<tenants>`` of the admin DSN's
server (kept for the next run unless ``--rebuild``), the scale corpus of ``recalld bench
scale`` (memory *i* the same as there) spread over ``tenants`` namespaces: the first ``big``
memories are tenant ``t0000``'s, the rest dealt in turn to ``t0001`` ...; one store handle
loads them all in bulk (the vector index built once at the end). Then, for the big tenant
and for a small one: the default hybrid search and a vector search through the facade (the
tenant's own handle, the query embedded by the real model inside each timed call), p50 /
p95 ms, each stage's milliseconds of the hybrid search (``--explain``'s) and each
question's hybrid top 10 (ids); and
recall@10 of the vector channel (HNSW under the tenant filter) against exact cosine over
the tenant's own vectors. ``--own-index``: then the big tenant once more, with a
vector index of its own rows (``recalld postgres tenant-index``). ``--word-index``: then the
big tenant with word postings (``recalld postgres word-index``): its searches again, and its
word channel alone with and without them, alternating question by question in one process
(p50 / p95, the exact top 10 found, the same hybrid top 10), and the rows written per
second into a scratch tenant with postings and one without. ``--word-check``: the big
tenant's word channel through the postings it already has against every matching row,
without rebuilding them. The searches connect as ``--role`` (the application's role by
default, as a user's server does; the tenant wall binds it), the building as the admin; each
result says the role it ran as. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import recalld
from recalld import heap
from recalld.bench import scale_corpus as sc, scale_postgres as sp
from recalld.bench.scale_worker import explained_tops
from recalld.config import Settings
from recalld.providers.embedders import resolve_embedder
from recalld.retrieval.channels import Need, request as channel_request
from recalld.stores import open_store
from recalld.stores.asks import NearestAsk
from recalld.stores.base import CandidateRequest, IndexBuilding, Tenancy, bulk_loading


def tenant_of(i: int, big: int, tenants: int) -> str:
    """The namespace memory ``i`` belongs to."""
    return "t0000" if i < big else f"t{1 + (i - big) % (tenants - 1):04d}"


def build(dsn: str, pool: sc.Pool, size: int, big: int, tenants: int, seed: int) -> float:
    names = tuple(f"t{n:04d}" for n in range(tenants))
    store = open_store(dsn, Tenancy("loader", names))
    store.set_fingerprint(pool.fingerprint)
    started = time.perf_counter()
    with bulk_loading(store):
        for start in range(0, size, sc.BLOCK):
            stop = min(size, start + sc.BLOCK)
            memories = [replace(m, namespace=tenant_of(start + k, big, tenants))
                        for k, m in enumerate(sc.memories(pool, start, stop, seed,
                                                          pool.fingerprint))]  # fmt: skip
            store.insert(memories, sc.derived_vectors(pool, start, stop, seed))
            print(f"built {stop:,} of {size:,} ({time.perf_counter() - started:.0f} s)",
                  flush=True)  # fmt: skip
    store.close()
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE memories")
    return time.perf_counter() - started


def timed(calls: list[Any]) -> dict[str, float]:
    times = []
    for call in calls:
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return {"p50_ms": float(np.percentile(times, 50)), "p95_ms": float(np.percentile(times, 95))}


def measure(dsn: str, tenant: str, questions: list[str], embedder: Any) -> dict[str, Any]:
    settings = Settings(db=dsn, cache_dir=None, embedder="local", tenant=tenant)
    out: dict[str, Any] = {"tenant": tenant}
    with recalld.open(settings=settings, embedder=embedder) as engine:
        out["searched_as"] = sp.searched_as(engine.store)
        out["memories"] = engine.status().store.memories
        for mode in ("hybrid", "vector"):
            for q in questions[:5]:  # warm the connections and the caches
                engine.search(q, limit=10, mode=mode)
            heap.settle()  # as `recalld serve` does once started
            out[mode] = timed([lambda q=q, m=mode: engine.search(q, limit=10, mode=m)
                               for q in questions])  # fmt: skip
        # Each stage's milliseconds (p50 / p95 / mean), from the same searches explained,
        # and each question's hybrid top 10 (ids), to compare two runs question by question.
        out["hybrid_top10"], out["hybrid_stage_ms"] = explained_tops(engine, questions, 10)
    store = open_store(dsn, Tenancy(tenant))
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(dsn) as conn:
        register_vector(conn)  # the role sees the tenant's rows once it declares them
        conn.execute("SELECT set_config('recalld.namespaces', %s, false)", (tenant,))
        rows = conn.execute("SELECT id, embedding FROM memories WHERE namespace = %s"
                            " AND embedding IS NOT NULL", (tenant,)).fetchall()  # fmt: skip
    ids = [r[0] for r in rows]
    matrix = np.stack([np.asarray(r[1].to_numpy(), dtype=np.float32) for r in rows])
    recalls = []
    for question in questions:
        vector = embedder.embed_query(question)
        exact = {ids[i] for i in np.argsort(-(matrix @ vector), kind="stable")[:10]}
        found = store.candidates(CandidateRequest(asks={"semantic": NearestAsk(10, vector)}))
        got = {c.memory_id for c in found.get("semantic", [])[:10]}
        recalls.append(len(got & exact) / max(1, min(10, len(exact))))
    store.close()
    out["vector_recall_at_10"] = float(np.mean(recalls))
    out["vector_recall_min"] = float(np.min(recalls))
    return out


def words(dsn: str, tenant: str, questions: list[str], embedder: Any) -> dict[str, Any]:
    """The word channel alone (limit as in a default search) through the tenant's postings
    and through every matching row, alternating, and the default search both ways."""
    from datetime import UTC, datetime

    from recalld.retrieval.config import RetrievalConfig
    from recalld.retrieval.query import understand
    from recalld.retrieval.request import SearchRequest, pool_size

    settings = Settings(db=dsn, cache_dir=None, embedder="local", tenant=tenant)
    with recalld.open(settings=settings, embedder=embedder) as engine:
        store: Any = engine.store
        assert store._word_postings, "no word postings: recalld postgres word-index"
        config = RetrievalConfig()
        limit = pool_size(SearchRequest(query="", limit=10), config)  # a default search's
        now = datetime.now(UTC)
        requests = [
            channel_request(Need({"bm25": limit}, understand(q, "hybrid", now).terms, q))
            for q in questions
        ]
        times: dict[bool, list[float]] = {True: [], False: []}
        found: dict[bool, list[list[str]]] = {True: [], False: []}
        for i, request in enumerate(requests):
            for postings in (True, False) if i % 2 else (False, True):
                store._word_postings = postings
                began = time.perf_counter()
                rows = store.candidates(request).get("bm25", [])
                times[postings].append((time.perf_counter() - began) * 1000)
                found[postings].append([c.memory_id for c in rows])
        top10 = [len(set(a[:10]) & set(b[:10])) / max(1, min(10, len(b)))
                 for a, b in zip(found[True], found[False], strict=True)]  # fmt: skip
        same_hybrid = 0
        for q in questions:
            hits = []
            for postings in (True, False):
                store._word_postings = postings
                hits.append([h.memory.id for h in engine.search(q, limit=10).hits])
            same_hybrid += hits[0] == hits[1]
        store._word_postings = True

    def p(values: list[float]) -> dict[str, float]:
        return {"p50_ms": float(np.percentile(values, 50)),
                "p95_ms": float(np.percentile(values, 95))}  # fmt: skip

    return {"word_channel_postings": p(times[True]), "word_channel_every_row": p(times[False]),
            "word_recall_at_10": float(np.mean(top10)), "word_recall_min": float(np.min(top10)),
            "word_top10_identical": sum(a[:10] == b[:10] for a, b in
                                        zip(found[True], found[False], strict=True)),
            "hybrid_top10_identical": same_hybrid, "questions": len(questions)}  # fmt: skip


def write_cost(dsn: str, pool: sc.Pool, batches: int = 10, rows: int = 500) -> dict[str, Any]:
    """Rows written per second into a scratch tenant with word postings and one without,
    batch by batch alternating, with vectors (a real write: the HNSW insert included) and
    without; the scratch tenants' rows are deleted afterwards."""
    from recalld.stores.postgres import PostgresStore

    stores = {"postings": PostgresStore(dsn, Tenancy("scratch_words_on")),
              "none": PostgresStore(dsn, Tenancy("scratch_words_off"))}  # fmt: skip
    stores["postings"].build_index("words")
    stores["postings"].close()
    stores["postings"] = PostgresStore(dsn, Tenancy("scratch_words_on"))
    out: dict[str, Any] = {}
    try:
        for with_vectors in (True, False):
            spent = dict.fromkeys(stores, 0.0)
            for b in range(batches):
                start = 10**7 + (b + batches * with_vectors) * rows
                memories = sc.memories(pool, start, start + rows, 7, pool.fingerprint)
                vectors = sc.derived_vectors(pool, start, start + rows, 7) if with_vectors else None
                for name in list(stores) if b % 2 else list(reversed(stores)):
                    began = time.perf_counter()
                    stores[name].insert(memories, vectors)
                    spent[name] += time.perf_counter() - began
            out["with_vectors" if with_vectors else "without_vectors"] = {
                name: batches * rows / took for name, took in spent.items()}  # fmt: skip
    finally:
        for name, store in stores.items():
            with store._conn() as conn:
                conn.execute("DELETE FROM memories WHERE namespace = ANY(%s)", (store._visible,))
            if name == "postings":
                store.build_index("words", drop=True)
            store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin", required=True, help="admin DSN of the PostgreSQL server")
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", type=Path, default=Path("../shared/benchmarks"))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/scale"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--database",
                        help="default: recalld_scale_tenants_<size>_<tenants>")  # fmt: skip
    parser.add_argument("--role", default=sp.APP_ROLE,
                        help="the role the searches connect as ('' for the admin's)")  # fmt: skip
    parser.add_argument("--word-check", action="store_true",
                        help="then the big tenant's word channel through its existing postings"
                             " against every matching row (nothing rebuilt)")  # fmt: skip
    parser.add_argument("--json", type=Path)
    parser.add_argument("--own-index", action="store_true",
                        help="then give the big tenant its own vector index (recalld postgres"
                             " tenant-index) and measure it again")  # fmt: skip
    parser.add_argument("--word-index", action="store_true",
                        help="then give the big tenant word postings (recalld postgres"
                             " word-index) and measure it again")  # fmt: skip
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    source = sc.read_sources(args.data)
    embedder = resolve_embedder("local")
    pool = sc.build_pool(sc.snippets(source.turns), 3000, args.seed, embedder, args.workdir)
    rng = np.random.default_rng(args.seed)
    picked = rng.choice(len(source.questions), args.queries, replace=False)
    questions = [source.questions[i] for i in sorted(picked)]
    name = args.database or f"recalld_scale_tenants_{args.size}_{args.tenants}"
    dsn = sp.database_dsn(args.admin, name)
    load_before = os.getloadavg()
    built = None
    if args.rebuild or not sp.exists(args.admin, name):
        sp.recreate(args.admin, name)
        built = build(dsn, pool, args.size, args.big, args.tenants, args.seed)
    searcher = sp.role_dsn(args.admin, name, args.role)
    small = tenant_of(args.big, args.big, args.tenants)
    big = open_store(dsn, Tenancy("t0000"))
    assert isinstance(big, IndexBuilding)
    if args.own_index:  # measured first as a tenant without one
        big.build_index("vectors", drop=True)
    if args.word_index:
        big.build_index("words", drop=True)
    results = [measure(searcher, t, questions, embedder) for t in ("t0000", small)]
    if args.own_index:
        started = time.perf_counter()
        big.build_index("vectors")
        took = time.perf_counter() - started
        results.append({**measure(searcher, "t0000", questions, embedder), "own_vector_index": True,
                        "index_build_s": took})  # fmt: skip
    if args.word_index:
        started = time.perf_counter()
        postings = big.build_index("words").entries
        took = time.perf_counter() - started
        results.append({**measure(searcher, "t0000", questions, embedder),
                        "word_postings": postings, "word_index_build_s": took,
                        **words(searcher, "t0000", questions, embedder),
                        "rows_written_per_s": write_cost(dsn, pool)})  # fmt: skip
    if args.word_check:
        results.append({"tenant": "t0000", "word_check": True,
                        **words(searcher, "t0000", questions, embedder)})  # fmt: skip
    big.close()
    report = {"size": args.size, "tenants": args.tenants, "big": args.big,
              "queries": args.queries, "build_s": built, "results": results,
              "load_average": {"start": load_before, "end": os.getloadavg()},
              "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())}  # fmt: skip
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
