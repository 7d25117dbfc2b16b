"""The child processes of one scale-benchmark size: build a store, index it, search it.

Each runs in a fresh process so its peak memory (``ru_maxrss``) is its own, and so the
search side starts cold, as a new ``recalld`` process would. They report over a queue:
``("total", n)``, ``("advance", n)``, ``("phase", text)``, then ``("done", dict)`` or
``("error", text)``.

``db`` is an SQLite file or, for the PostgreSQL side, a ``postgresql://`` DSN; the store is
opened through :func:`recalld.stores.open_store` either way.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld import heap
from recalld.bench import scale_corpus as sc

Report = Callable[[str, Any], None]
FLOOR_LIMIT = 40
"""Candidates the floors fetch: the per-channel pool a default search (limit 10) asks for."""


def peak_rss_mb() -> float | None:
    """This process's peak resident memory so far, in MiB (None where unsupported).

    Linux's ``VmHWM`` first: ``ru_maxrss`` survives ``exec``, so a spawned child would
    report its parent's peak whenever that is higher.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def run_child(target: str, queue: Queue[tuple[str, Any]], kwargs: dict[str, Any]) -> None:
    """Entry point of a child: run ``build`` or ``search`` and send the outcome."""
    try:

        def report(kind: str, value: Any) -> None:
            queue.put((kind, value))

        steps: dict[str, Callable[..., dict[str, Any]]] = {
            "build": build,
            "index": index,
            "search": search,
        }
        result = steps[target](report, **kwargs)
        queue.put(("done", result))
    except BaseException:  # the parent must hear about any failure, then the child exits
        queue.put(("error", traceback.format_exc()))


def build(report: Report, db: str, pool_path: str, size: int, seed: int) -> dict[str, Any]:
    """Insert ``size`` synthetic memories with vectors, then settle the store (SQLite: a WAL
    checkpoint; PostgreSQL: ``VACUUM ANALYZE``, as autovacuum would soon do)."""
    from recalld.config import is_dsn
    from recalld.stores import open_store
    from recalld.stores.base import bulk_loading

    pool = sc.Pool.load(Path(pool_path))
    store = open_store(db)
    store.set_fingerprint(pool.fingerprint)
    report("phase", f"{size:,}: inserting")
    report("total", size)
    generate = insert = 0.0
    started = time.perf_counter()
    with bulk_loading(store) as deferred:
        for start in range(0, size, sc.BLOCK):
            stop = min(size, start + sc.BLOCK)
            block_start = time.perf_counter()
            memories = sc.memories(pool, start, stop, seed, pool.fingerprint)
            vectors = sc.derived_vectors(pool, start, stop, seed)
            generated = time.perf_counter()
            store.insert(memories, vectors)
            insert += time.perf_counter() - generated
            generate += generated - block_start
            report("advance", stop - start)
        if deferred:
            report("phase", f"{size:,}: building the vector index")
        indexed = time.perf_counter()
    index_s = time.perf_counter() - indexed
    store.close()
    _vacuum(db) if is_dsn(db) else _checkpoint(db)
    total = time.perf_counter() - started
    return {
        "insert_s": insert + index_s,
        "rows_s": insert,
        "vector_index_s": index_s,
        "bulk_load": bool(deferred),
        "generate_s": generate,
        "build_s": total,
        "peak_build_mb": peak_rss_mb(),
    }


def _checkpoint(db: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _vacuum(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE memories")


def index(report: Report, db: str, pool_path: str) -> dict[str, Any]:
    """Time the first vector search of a new process on the built store.

    It loads the vectors and, for stores of ``ANN_MIN_ROWS`` vectors or more, loads the
    saved ANN index or, when there is none yet, builds and saves it.
    """
    from recalld.config import is_dsn
    from recalld.stores import open_store
    from recalld.stores.base import CandidateRequest, IndexBuilding, NearestAsk

    query = sc.Pool.load(Path(pool_path)).vectors[0]
    saved = not is_dsn(db) and any(Path(f"{db}.ann").glob("*.usearch"))
    report("phase", "loading vectors, building or loading the ANN index")
    store = open_store(db)
    started = time.perf_counter()
    store.candidates(CandidateRequest(asks={"semantic": NearestAsk(FLOOR_LIMIT, query)}))
    elapsed = time.perf_counter() - started
    # PostgreSQL: the word postings `recalld status` advises at this size, built as a user
    # following it would (SQLite builds its word index by itself).
    words_s = None
    if isinstance(store, IndexBuilding) and "words" in store.advised_indexes():
        report("phase", "building the word postings")
        began = time.perf_counter()
        store.build_index("words")
        words_s = time.perf_counter() - began
    store.close()
    return {
        "first_search_s": elapsed,
        "index_was_saved": saved,
        "peak_index_mb": peak_rss_mb(),
        "word_postings_s": words_s,
    }


def search(
    report: Report,
    db: str,
    embedder: str,
    questions: list[str],
    limit: int,
    floor_db: str | None = None,
) -> dict[str, Any]:
    """Time searches of a built store: each mode through the facade, then the two floors
    (PostgreSQL's on ``floor_db`` when given: the indexes alone, as the admin). On
    PostgreSQL ``searched_as`` says which role the searches ran as."""
    import recalld
    from recalld.bench.scale_postgres import searched_as
    from recalld.config import Settings, is_dsn
    from recalld.providers.embedders import resolve_embedder

    model = resolve_embedder(embedder)
    model.embed_query("warm up the model")  # loading the model is not the store's cost
    settings = Settings(db=db if is_dsn(db) else Path(db), cache_dir=None, embedder=embedder)
    out: dict[str, Any] = {}
    with recalld.open(settings=settings, embedder=model) as engine:
        if is_dsn(db):
            out["searched_as"] = searched_as(engine.store)
        started = time.perf_counter()
        engine.search(questions[0], limit=limit, mode="vector")
        out["cold_start_s"] = time.perf_counter() - started
        heap.settle()  # as `recalld serve` does once started
        for mode in ("vector", "hybrid"):
            report("phase", f"searching ({mode})")
            out[mode] = _timed(questions, partial(engine.search, limit=limit, mode=mode))
        out["embed"] = _timed(questions, model.embed_query)
        tops, out["stages"] = explained_tops(engine, questions, limit)
    out["peak_search_mb"] = peak_rss_mb()
    if not is_dsn(db):
        report("phase", "searching (exact BM25 and exact vectors, for agreement)")
        out["exact_agreement"] = _exact_agreement(settings, model, questions, limit, tops)
    report("phase", "searching (floors)")
    del engine  # free the mirror before the floors load their own matrix
    if is_dsn(db):
        out.update(_postgres_floors(floor_db or db, model, questions))
        return out
    out["fts5"] = _fts5_floor(db, questions)
    out["numpy"] = _numpy_floor(db, model, questions)
    return out


def hybrid_tops(engine: Any, questions: list[str], limit: int) -> list[list[str]]:
    """Each question's default hybrid results, as memory ids."""
    return [
        [hit.memory.id for hit in engine.search(q, limit=limit, mode="hybrid").hits]
        for q in questions
    ]


def explained_tops(
    engine: Any, questions: list[str], limit: int
) -> tuple[list[list[str]], dict[str, dict[str, float]]]:
    """Each question's default hybrid results (as :func:`hybrid_tops`), searched with
    ``explain``, and the p50 / p95 / mean of each stage's milliseconds over the questions
    (``details["stage_ms"]``; a stage a search skipped counts 0), with the searches' own
    time as ``took``."""
    tops: list[list[str]] = []
    spent: list[dict[str, float]] = []
    for question in questions:
        result = engine.search(question, limit=limit, mode="hybrid", explain=True)
        tops.append([hit.memory.id for hit in result.hits])
        spent.append({**result.details.get("stage_ms", {}), "took": result.took_ms})
    stages = list(dict.fromkeys(stage for times in spent for stage in times))
    return tops, {stage: latency_ms([times.get(stage, 0.0) for times in spent]) for stage in stages}


def agreement(got: list[list[str]], exact: list[list[str]]) -> dict[str, float]:
    """How often ``got`` is ``exact``, question by question: the same list, the same set,
    the same top hit."""
    pairs = list(zip(got, exact, strict=True))
    return {
        "same_list": sum(a == b for a, b in pairs) / len(pairs),
        "same_set": sum(set(a) == set(b) for a, b in pairs) / len(pairs),
        "same_top1": sum(a[:1] == b[:1] for a, b in pairs) / len(pairs),
    }


def store_bench_options(description: str, rounds: int) -> argparse.ArgumentParser:
    """The options every script that times searches on one scale store takes: ``--store``,
    ``--questions``, ``--rounds``, ``--seed``, ``--data``, ``--out``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--store", required=True, help="a scale store: its SQLite file or its PostgreSQL DSN"
    )
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", type=Path, default=Path("../shared/benchmarks"))
    parser.add_argument("--out", type=Path)
    return parser


def question_sample(data: Path, count: int, seed: int) -> list[str]:
    """``count`` of the scale corpus's real questions, the same ones for the same seed."""
    questions = sc.read_sources(data).questions
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(questions), min(count, len(questions)), replace=False)
    return [questions[i] for i in sorted(picked)]


def bench_inputs(args: argparse.Namespace) -> tuple[list[str], Any, Any]:
    """What a script of :func:`store_bench_options` times searches with: its sample of
    questions, the packaged model (warmed up) and the settings of its ``--store``."""
    from recalld.config import Settings
    from recalld.providers.embedders import resolve_embedder

    model = resolve_embedder("local")
    model.embed_query("warm up the model")
    settings = Settings(db=args.store, cache_dir=None, embedder="local")
    return question_sample(args.data, args.questions, args.seed), model, settings


def write_report(report: dict[str, Any], out: Path | None) -> None:
    """Print the report as JSON, and write it to ``out`` when given."""
    text = json.dumps(report, indent=1)
    print(text)
    if out:
        out.write_text(text + "\n", encoding="utf-8")


def latency_ms(times: list[float]) -> dict[str, float]:
    """p50 / p95 / mean of ``times`` (milliseconds)."""
    ms = np.array(times)
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "mean_ms": float(ms.mean()),
    }


def _exact_agreement(
    settings: Any, model: Any, questions: list[str], limit: int, tops: list[list[str]]
) -> dict[str, Any]:
    """How often the hybrid results (``tops``, from the word index and the ANN index a large
    store uses) are the ones exact BM25 (FTS5 over every matching row) and exact cosine (the
    whole vector matrix) give: the same list, and the same set."""
    import recalld
    from recalld.stores.sqlite import SQLiteStore

    with recalld.open(settings=settings, embedder=model) as engine:
        assert isinstance(engine.store, SQLiteStore)
        engine.store.search_exactly()
        exact = hybrid_tops(engine, questions, limit)
    return {"questions": len(tops), "limit": limit, **agreement(tops, exact)}


def _timed(questions: list[str], call: Callable[[str], object]) -> dict[str, float]:
    """p50/p95/mean in milliseconds of ``call(question)``, one question at a time."""
    times = []
    for question in questions:
        started = time.perf_counter()
        call(question)
        times.append((time.perf_counter() - started) * 1000)
    return latency_ms(times)


def _fts5_floor(db: str, questions: list[str]) -> dict[str, float]:
    """Plain FTS5: the query's keywords OR-ed, BM25 order, no join, no embedding."""
    from recalld.stores.sqlite.queries import fts_match
    from recalld.text import keywords

    conn = sqlite3.connect(db)
    sql = (
        "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?"
        " ORDER BY bm25(memories_fts) LIMIT ?"
    )

    def one(question: str) -> list[Any]:
        match = fts_match(tuple(keywords(question))) or '""'
        return conn.execute(sql, (match, FLOOR_LIMIT)).fetchall()

    result = _timed(questions, one)
    conn.close()
    return result


def _numpy_floor(db: str, model: Any, questions: list[str]) -> dict[str, float]:
    """Plain exact cosine: embed the query, one matrix product, ``argpartition``."""
    conn = sqlite3.connect(db)
    blobs = b"".join(r[0] for r in conn.execute("SELECT vector FROM vectors"))
    conn.close()
    matrix = np.frombuffer(blobs, dtype=np.float32).reshape(-1, model.fingerprint.dimension)

    def one(question: str) -> npt.NDArray[np.intp]:
        scores = matrix @ model.embed_query(question)
        count = min(FLOOR_LIMIT, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        return top[np.argsort(-scores[top])]

    return _timed(questions, one)


def _postgres_floors(dsn: str, model: Any, questions: list[str]) -> dict[str, Any]:
    """PostgreSQL's plain queries over the same table: the HNSW index alone (embedding
    included, ``hnsw.ef_search`` as the store sets it) and the word index alone (the OR-ed
    keywords, FTS5's BM25 order, no embedding)."""
    import psycopg
    from pgvector.psycopg import register_vector

    from recalld.lexical import phrases
    from recalld.stores.postgres.indexes import EF_SEARCH
    from recalld.stores.postgres.word_sql import bm25_ctes
    from recalld.text import keywords

    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(EF_SEARCH),))
        conn.execute("SELECT set_config('recalld.namespaces', 'default', false)")

        def vector(question: str) -> list[Any]:
            return conn.execute(
                "SELECT id FROM memories ORDER BY embedding <=> %s LIMIT %s",
                (model.embed_query(question), FLOOR_LIMIT),
            ).fetchall()

        def text(question: str) -> list[Any]:
            query = phrases(keywords(question))
            if not query:
                return []
            ctes, params = bm25_ctes(query, "m.forgotten_at IS NULL")
            return conn.execute(
                f"WITH {', '.join(ctes)} SELECT id FROM bm25",
                {**params, "bm25_limit": FLOOR_LIMIT, "namespaces": ["default"]},
            ).fetchall()

        return {"vector_floor": _timed(questions, vector), "text_floor": _timed(questions, text)}
