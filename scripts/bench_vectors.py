"""Compare vector search back ends at 100k and 1M x 384: exact numpy, sqlite-vec, usearch, hnswlib.

Vectors are derived from real embeddings (see recalld.bench.scale_corpus): a pool of real
benchmark snippets embedded by the packaged model, mixed in pairs plus seeded noise.
Queries are real LongMemEval/LoCoMo questions embedded by the same model.

    PYTHONPATH=src python scripts/bench_vectors.py --sizes 100000,1000000 --json out.json

For each back end and size: build time, memory added (RSS), query latency p50/p95 for one
query at a time at each k, and for the ANN ones recall@k against exact search, both raw and
after fetching 2k candidates and re-scoring them exactly (what recalld does).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from recalld.bench import scale_corpus as sc
from recalld.providers.embedders import resolve_embedder

KS = (40, 200)
RESCORE_FACTORS = (1, 2, 4)
EFS = (160, 320, 640, 1280, 2560)


def rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def exact_top(matrix: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    scores = matrix @ query
    top = np.argpartition(-scores, k - 1)[:k]
    return top[np.argsort(-scores[top])]


def timed(search: Callable[[np.ndarray, int], np.ndarray], queries: np.ndarray, k: int) -> dict:
    search(queries[0], k)  # warm up
    times = []
    for query in queries:
        started = time.perf_counter()
        search(query, k)
        times.append(time.perf_counter() - started)
    ms = np.array(times) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95))}


def recall(found: list[np.ndarray], truth: list[np.ndarray]) -> float:
    hits = [
        len(set(f.tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth, strict=True)
    ]
    return float(np.mean(hits))


def bench_numpy(matrix: np.ndarray, queries: np.ndarray, truth: dict) -> dict:
    out: dict = {"build_s": 0.0, "memory_mb": matrix.nbytes / 2**20}
    for k in KS:
        out[f"k{k}"] = timed(lambda q, k: exact_top(matrix, q, k), queries, k)
    return out


def bench_numpy_f16(matrix: np.ndarray, queries: np.ndarray, truth: dict) -> dict:
    half = matrix.astype(np.float16)
    out: dict = {"build_s": 0.0, "memory_mb": half.nbytes / 2**20}
    few = queries[: max(5, len(queries) // 10)]
    for k in KS:
        out[f"k{k}"] = timed(lambda q, k: exact_top(half, q.astype(np.float16), k), few, k)
    return out


def bench_sqlite_vec(matrix: np.ndarray, queries: np.ndarray, truth: dict, work: Path) -> dict:
    """sqlite-vec's vec0 (brute force), driven through the sqlite3 shell.

    This Python's sqlite3 module was built without ``enable_load_extension`` (so recalld
    could not load sqlite-vec here at all); the shell can, and times each statement itself.
    """
    import sqlite_vec

    path = work / "vec.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE src (id INTEGER PRIMARY KEY, v BLOB)")
    db.execute("BEGIN")
    db.executemany("INSERT INTO src VALUES (?, ?)",
                   ((i + 1, row.tobytes()) for i, row in enumerate(matrix)))  # fmt: skip
    db.execute("COMMIT")
    db.close()
    few = queries[: max(10, len(queries) // 5)]
    lines = [
        f".load {sqlite_vec.loadable_path()}",
        ".timer on",
        f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{matrix.shape[1]}]);",
        "INSERT INTO v(rowid, embedding) SELECT id, v FROM src;",
        "SELECT 'built';",
    ]
    for k in KS:
        for query in few:
            blob = query.astype(np.float32).tobytes().hex()
            lines.append(
                f"SELECT group_concat(rowid) FROM (SELECT rowid FROM v WHERE embedding"
                f" MATCH X'{blob}' AND k = {k} ORDER BY distance);"
            )
    shell = subprocess.run(["sqlite3", "-batch", str(path)], input="\n".join(lines),
                           capture_output=True, text=True, check=True)  # fmt: skip
    times = [float(line.split()[3]) for line in shell.stdout.splitlines()
             if line.startswith("Run Time:")]  # fmt: skip
    rows = [line for line in shell.stdout.splitlines()
            if line and not line.startswith("Run Time:") and line != "built"]  # fmt: skip
    out: dict = {"build_s": times[1], "disk_mb": path.stat().st_size / 2**20, "memory_mb": 0.0}
    query_times = times[3:]
    for n, k in enumerate(KS):
        ms = np.array(query_times[n * len(few) : (n + 1) * len(few)]) * 1000
        found = [
            np.array([int(x) - 1 for x in r.split(",")])
            for r in rows[n * len(few) : (n + 1) * len(few)]
        ]
        out[f"k{k}"] = {
            "p50_ms": float(np.percentile(ms, 50)),
            "p95_ms": float(np.percentile(ms, 95)),
            "recall": recall(found, truth[k][: len(few)]),
        }
    path.unlink()
    return out


def ann_report(build_s: float, memory_mb: float, search, matrix, queries, truth) -> dict:
    """Latency and quality per search beam width (ef) and candidates fetched per result
    (re-scored exactly; factor 1 is the raw ANN answer)."""
    out: dict = {"build_s": build_s, "memory_mb": memory_mb}
    for k in KS:
        for factor in RESCORE_FACTORS:
            for ef in EFS:
                if ef < k * factor:
                    continue

                def rescored(query: np.ndarray, k=k, ef=ef, factor=factor) -> np.ndarray:
                    candidates = search(query, k * factor, ef)
                    scores = matrix[candidates] @ query
                    return candidates[np.argsort(-scores)[:k]]

                timing = timed(lambda q, _k, f=rescored: f(q), queries, k)
                found = [rescored(q) for q in queries]
                out[f"k{k}_x{factor}_ef{ef}"] = {**timing, **quality(found, truth, k)}
    return out


def bench_usearch(matrix, queries, truth, dtype: str, threads: int, connectivity: int,
                  work: Path, store_index: Path | None = None) -> dict:  # fmt: skip
    from usearch.index import Index

    gc.collect()
    before = rss_mb()
    saved = work / f"usearch-{len(matrix)}-{dtype}-m{connectivity}.usearch"
    build = float("nan")
    offset = 0
    if store_index is not None:  # the index a scale-bench store built: keys are pks (row + 1)
        index, offset = Index.restore(str(store_index)), 1
    elif saved.is_file():  # built by an earlier run of this script: its build time is in its JSON
        index = Index.restore(str(saved))
    else:
        index = Index(ndim=matrix.shape[1], metric="cos", dtype=dtype, connectivity=connectivity,
                      expansion_add=128, expansion_search=64)  # fmt: skip
        started = time.perf_counter()
        index.add(np.arange(len(matrix)), matrix, threads=threads)
        build = time.perf_counter() - started
        index.save(str(saved))
    memory = rss_mb() - before

    def search(query: np.ndarray, k: int, ef: int) -> np.ndarray:
        index.expansion_search = ef
        return index.search(query, k).keys.astype(np.int64) - offset

    out = ann_report(build, memory, search, matrix, queries, truth)
    out["index_bytes_mb"] = index.memory_usage / 2**20
    return out


def bench_hnswlib(matrix, queries, truth, threads: int, connectivity: int) -> dict:
    import hnswlib

    gc.collect()
    before = rss_mb()
    index = hnswlib.Index(space="cosine", dim=matrix.shape[1])
    index.init_index(max_elements=len(matrix), ef_construction=128, M=connectivity)
    started = time.perf_counter()
    index.add_items(matrix, np.arange(len(matrix)), num_threads=threads)
    build = time.perf_counter() - started
    memory = rss_mb() - before
    index.set_num_threads(1)

    def search(query: np.ndarray, k: int, ef: int) -> np.ndarray:
        index.set_ef(ef)
        labels, _ = index.knn_query(query, k=k)
        return labels[0].astype(np.int64)

    return ann_report(build, memory, search, matrix, queries, truth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--pool", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--m", type=int, default=16, help="HNSW connectivity")
    parser.add_argument("--store-index", help="a .usearch file a scale-bench store saved")
    parser.add_argument(
        "--methods", default="numpy,numpy_f16,sqlite_vec,usearch_f16,usearch_i8,hnswlib"
    )
    parser.add_argument("--data", default="../shared/benchmarks")
    parser.add_argument("--workdir", default="/tmp/recalld-bench-vectors")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    embedder = resolve_embedder("local")
    source = sc.read_sources(Path(args.data))
    pool = sc.build_pool(sc.snippets(source.turns), args.pool, args.seed, embedder, work)
    rng = np.random.default_rng(args.seed)
    asked = [
        source.questions[i] for i in rng.choice(len(source.questions), args.queries, replace=False)
    ]
    queries = embedder.embed_documents(asked).vectors
    results: dict = {"pool": args.pool, "queries": args.queries, "cpus": os.cpu_count(),
                     "load_before": os.getloadavg(), "sizes": {}}  # fmt: skip
    for size in (int(s) for s in args.sizes.split(",")):
        matrix = np.vstack([v for _, v in _vector_blocks(pool, size, args.seed)])
        truth = {k: [exact_top(matrix, q, k) for q in queries] for k in KS}
        results["sizes"][size] = {}
        for name in args.methods.split(","):
            print(f"{size} {name} (load {os.getloadavg()[0]:.1f}) ...", flush=True)
            results["sizes"][size][name] = run_method(name, matrix, queries, truth, args, work)
            print(json.dumps(results["sizes"][size][name]), flush=True)
        del matrix, truth
    results["load_after"] = os.getloadavg()
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(results, indent=2))


def kmeans(matrix: np.ndarray, lists: int, seed: int, iterations: int = 10) -> np.ndarray:
    """Spherical k-means on a sample: unit centroids, assignment by largest dot product."""
    rng = np.random.default_rng(seed)
    sample = matrix[rng.choice(len(matrix), min(len(matrix), 64 * lists), replace=False)]
    centroids = sample[rng.choice(len(sample), lists, replace=False)].copy()
    for _ in range(iterations):
        assign = np.argmax(sample @ centroids.T, axis=1)
        sums = np.zeros_like(centroids)
        np.add.at(sums, assign, sample)
        empty = np.linalg.norm(sums, axis=1) == 0
        sums[empty] = sample[rng.choice(len(sample), int(empty.sum()))]
        centroids = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    return centroids


def bench_ivf(matrix, queries, truth, seed: int) -> dict:
    """IVF-flat in numpy: k-means lists, probe the closest lists, score their rows exactly."""
    lists = int(2 * np.sqrt(len(matrix)))
    started = time.perf_counter()
    centroids = kmeans(matrix, lists, seed)
    assign = np.concatenate([np.argmax(matrix[s : s + 65536] @ centroids.T, axis=1)
                             for s in range(0, len(matrix), 65536)])  # fmt: skip
    order = np.argsort(assign, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(assign, minlength=lists))])
    build = time.perf_counter() - started
    out: dict = {
        "build_s": build,
        "lists": lists,
        "memory_mb": (order.nbytes + centroids.nbytes) / 2**20,
    }
    for k in KS:
        for probes in (8, 16, 32, 64):

            def search(query: np.ndarray, k: int = k, probes: int = probes) -> np.ndarray:
                near = np.argpartition(-(centroids @ query), probes - 1)[:probes]
                rows = np.concatenate([order[bounds[c] : bounds[c + 1]] for c in near])
                scores = matrix[rows] @ query
                count = min(k, len(rows))
                top = np.argpartition(-scores, count - 1)[:count]
                return rows[top[np.argsort(-scores[top])]]

            timing = timed(lambda q, _k, f=search: f(q), queries, k)
            out[f"k{k}_probe{probes}"] = {
                **timing,
                **quality([search(q) for q in queries], truth, k),
            }
    return out


def quality(found: list[np.ndarray], truth: dict, k: int) -> dict:
    """recall@k against exact search, and the share of the exact top 10 among the k found."""
    held = [len(set(f.tolist()) & set(t[:10].tolist())) / 10
            for f, t in zip(found, truth[k], strict=True)]  # fmt: skip
    return {"recall": recall(found, truth[k]), "top10_held": float(np.mean(held))}


def run_method(name: str, matrix, queries, truth, args, work: Path) -> dict:
    if name == "numpy":
        return bench_numpy(matrix, queries, truth)
    if name == "numpy_f16":
        return bench_numpy_f16(matrix, queries, truth)
    if name == "sqlite_vec":
        return bench_sqlite_vec(matrix, queries, truth, work)
    if name.startswith("usearch_"):
        dtype = name.split("_")[1]
        return bench_usearch(matrix, queries, truth, dtype, args.threads, args.m, work,
                             Path(args.store_index) if args.store_index else None)  # fmt: skip
    if name == "hnswlib":
        return bench_hnswlib(matrix, queries, truth, args.threads, args.m)
    if name == "ivf":
        return bench_ivf(matrix, queries, truth, args.seed)
    raise SystemExit(f"unknown method {name}")


def _vector_blocks(pool, size, seed):
    for start in range(0, size, sc.BLOCK):
        stop = min(size, start + sc.BLOCK)
        yield start, sc.derived_vectors(pool, start, stop, seed)


if __name__ == "__main__":
    main()
