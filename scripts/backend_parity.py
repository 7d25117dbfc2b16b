"""Build a store from a benchmark file on SQLite, copy it to PostgreSQL and back with
``recalld migrate``, and compare: counts, checksums, and every question's search results
(vector and hybrid mode) on the three stores; then measure the HNSW index's recall@k
against exact search at several ``hnsw.ef_search`` values.

    python scripts/backend_parity.py locomo /work/shared/benchmarks/locomo/locomo.json
    python scripts/backend_parity.py longmemeval FILE.json[.gz] --questions 3

Starts a local PostgreSQL (``recalld postgres start``) in a temporary folder unless
``--dsn`` names a server (an admin DSN: the script creates and drops a database).
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

import recalld
from recalld import local_postgres
from recalld.config import Settings
from recalld.migration import checksum


def _questions(fmt: str, path: Path, count: int, folder: Path) -> tuple[Path, list[str]]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    data = json.loads(raw)
    if fmt == "longmemeval":
        data = data[:count]
        subset = folder / "subset.json"
        subset.write_text(json.dumps(data), encoding="utf-8")
        return subset, [q["question"] for q in data]
    return path, [qa["question"] for sample in data for qa in sample["qa"]]


def _search_all(location: str, questions: list[str], mode: str) -> tuple[list[list[str]], str]:
    """Each question's top-10 ids, and the p50/p95 of the searches (query embedding
    included; the first search, which loads the model, is not timed)."""
    settings = Settings(db=location, cache_dir=None)
    with recalld.open(settings=settings) as engine:
        engine.search("warm up", mode=mode)  # type: ignore[arg-type]
        ids, took = [], []
        for q in questions:
            started = time.perf_counter()
            hits = engine.search(q, limit=10, mode=mode).hits  # type: ignore[arg-type]
            took.append((time.perf_counter() - started) * 1000)
            ids.append([h.memory.id for h in hits])
    p50, p95 = np.percentile(took, [50, 95])
    return ids, f"p50 {p50:.1f} ms, p95 {p95:.1f} ms"


def _recall(dsn: str, questions: list[str], k: int, efs: list[int]) -> dict[int, float]:
    from recalld.providers.embedders import resolve_embedder

    embedder = resolve_embedder("local")
    vectors = [embedder.embed_query(q) for q in questions]
    out: dict[int, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET recalld.namespaces = 'default'")
        sql = "SELECT id FROM memories ORDER BY embedding <=> %s LIMIT %s"
        conn.execute("SET enable_indexscan = off")
        exact = [{r[0] for r in conn.execute(sql, (v, k))} for v in vectors]
        conn.execute("SET enable_indexscan = on")
        for ef in efs:
            conn.execute(f"SET hnsw.ef_search = {ef}")
            found = [{r[0] for r in conn.execute(sql, (v, k))} for v in vectors]
            out[ef] = float(np.mean([len(a & b) / k for a, b in zip(exact, found, strict=True)]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("format", choices=["longmemeval", "locomo"])
    parser.add_argument("file", type=Path)
    parser.add_argument("--questions", type=int, default=3,
                        help="LongMemEval: how many questions' haystacks to store")  # fmt: skip
    parser.add_argument("--searches", type=int, default=200,
                        help="search at most this many questions (the first ones)")  # fmt: skip
    parser.add_argument("--dsn")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="recalld-parity-"))
    admin = args.dsn or local_postgres.start(folder / "pg").admin_dsn
    name = f"parity_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    try:
        source, questions = _questions(args.format, args.file, args.questions, folder)
        questions = questions[: args.searches]
        first, back = str(folder / "first.db"), str(folder / "back.db")
        started = time.perf_counter()
        cache = Path(tempfile.gettempdir()) / "recalld-parity-cache"
        with recalld.open(settings=Settings(db=first, cache_dir=cache)) as engine:
            engine.import_transcript(source, args.format)
        print(f"built in {time.perf_counter() - started:.0f} s")
        there = recalld.migrate_store(first, dsn)
        again = recalld.migrate_store(dsn, back)
        sums = [checksum(s, "default") for s in _stores(first, dsn, back)]
        print(f"memories {there.memories} / {again.memories}, vectors {there.with_vectors} /"
              f" {again.with_vectors}, checksums equal: {len(set(sums)) == 1}")  # fmt: skip
        for mode in ("vector", "hybrid"):
            (a, ta), (b, tb), (c, _) = (_search_all(x, questions, mode) for x in (first, dsn, back))
            same = lambda x, y: sum(p == q for p, q in zip(x, y, strict=True))  # noqa: E731
            print(f"{mode}: {len(questions)} questions; top-10 ids identical SQLite/PostgreSQL"
                  f" {same(a, b)}, SQLite/SQLite after the round trip {same(a, c)};"
                  f" SQLite {ta}, PostgreSQL {tb}")  # fmt: skip
        for k in (10, 50):
            print(f"HNSW recall@{k} vs exact:", _recall(dsn, questions, k, [40, 100, 200]))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if not args.dsn:
            local_postgres.stop(folder / "pg")


def _stores(*locations: str) -> list[recalld.stores.Store]:
    from recalld.stores import open_store

    return [open_store(x) for x in locations]


if __name__ == "__main__":
    main()
