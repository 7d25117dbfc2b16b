"""HNSW recall@k against exact search on PostgreSQL, at several ``hnsw.ef_search`` values.

Vectors are mixtures of two real embeddings read from an SQLite store (plus noise), so they
cluster as text embeddings do; queries are further mixtures, not in the table.

    python scripts/hnsw_recall.py STORE.db --rows 20000 --queries 200
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from recalld import local_postgres


def mixtures(base: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    a, b = rng.integers(0, len(base), count), rng.integers(0, len(base), count)
    weight = rng.uniform(0.2, 0.8, (count, 1)).astype(np.float32)
    mixed = base[a] * weight + base[b] * (1 - weight)
    mixed += rng.normal(0, 0.02, mixed.shape).astype(np.float32)
    return (mixed / np.linalg.norm(mixed, axis=1, keepdims=True)).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dsn")
    args = parser.parse_args()
    db = sqlite3.connect(args.store)
    base = np.stack(
        [np.frombuffer(b, np.float32) for (b,) in db.execute("SELECT vector FROM vectors")]
    )
    rng = np.random.default_rng(7)
    rows, queries = mixtures(base, args.rows, rng), mixtures(base, args.queries, rng)
    folder = Path(tempfile.mkdtemp(prefix="recalld-hnsw-"))
    admin = args.dsn or local_postgres.start(folder / "pg").admin_dsn
    name = f"hnsw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        dsn = urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
            register_vector(conn)
            conn.execute(f"CREATE TABLE t (id int PRIMARY KEY, v vector({base.shape[1]}))")
            with conn.cursor().copy("COPY t (id, v) FROM STDIN WITH (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "vector"])
                for i, v in enumerate(rows):
                    copy.write_row((i, v))
            started = time.perf_counter()
            conn.execute("CREATE INDEX ON t USING hnsw (v vector_cosine_ops)")
            print(f"{args.rows} rows of {base.shape[1]} dims; HNSW built in"
                  f" {time.perf_counter() - started:.1f} s")  # fmt: skip
            for k in (10, 50):
                sql = "SELECT id FROM t ORDER BY v <=> %s LIMIT %s"
                conn.execute("SET enable_indexscan = off")
                exact = [{r[0] for r in conn.execute(sql, (q, k))} for q in queries]
                conn.execute("SET enable_indexscan = on")
                for ef in (40, 100, 200):
                    conn.execute(f"SET hnsw.ef_search = {ef}")
                    started = time.perf_counter()
                    found = [{r[0] for r in conn.execute(sql, (q, k))} for q in queries]
                    ms = (time.perf_counter() - started) * 1000 / len(queries)
                    recall = np.mean([len(a & b) / k for a, b in zip(exact, found, strict=True)])
                    print(f"recall@{k} ef_search={ef}: {recall:.4f} ({ms:.1f} ms a query)")
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if not args.dsn:
            local_postgres.stop(folder / "pg")


if __name__ == "__main__":
    main()
