"""Recall and walk CPU of HNSW graph variants against a narrower search beam (an experiment,
not a test).

    PYTHONPATH=src .venv/bin/python scripts/ann_beam_recall.py --store STORE.db \\
        [--variants c16-i8-e384,c16-f16-e384,c24-i8-e384] [--per 1,1.25,1.5,2] \\
        [--questions 200] [--rounds 2] [--graphs /tmp/graphs] [--out report.json]

The store is one ``recalld bench scale`` built (its ANN folder holds the vectors file). Each
variant (``c<connectivity>-<dtype>-e<build beam>``) is built with usearch from the file's
vectors (or loaded from ``--graphs`` when built before), then searched the way
:meth:`recalld.stores.sqlite.vector_index.AnnIndex.candidates` does for the default search's
432 candidates, with a beam of ``per`` x 432 (x the store's size over 100k): the fraction of
the exact 10 / 216 / 432 nearest among the 432 kept, the questions whose exact 10 and 216
are all there (the channel re-scores exactly, so those are the questions whose channel top
is exact), and the walk's thread CPU over ``--rounds`` timed passes after an untimed one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from recalld.bench.report import print_json
from recalld.bench.scale_worker import question_sample
from recalld.providers.embedders import resolve_embedder
from recalld.stores.sqlite import ann_beam, vector_file, vector_index

CANDIDATES = 432
"""The default search's candidates (216 kept x ``RESCORE_FACTOR``)."""
KEPT = 216


def variant(name: str) -> tuple[int, str, int]:
    connectivity, dtype, add = name.split("-")
    return int(connectivity[1:]), dtype, int(add[1:])


def load_vectors(store: Path) -> tuple[np.ndarray, np.ndarray]:
    folder = Path(f"{store}.ann")
    seq = max(int(p.stem) for p in vector_file.saved_files(folder))
    with open(folder / vector_file.file_name(seq), "rb") as f:
        header = vector_file.HEADER.unpack(f.read(vector_file.HEADER.size))
    dimension, rows = header[2], header[3]
    copies = vector_file.VectorCopies.open(folder, seq, dimension)
    assert copies is not None
    at = vector_file._offsets(rows, dimension)
    raw = np.memmap(folder / vector_file.file_name(seq), mode="r")
    pks = np.frombuffer(raw, dtype="<i8", count=rows, offset=at["pks"]).copy()
    matrix = np.frombuffer(raw, dtype="<f4", count=rows * dimension, offset=at["vectors"])
    return pks, matrix.reshape(rows, dimension).copy()


def graph(name: str, pks: np.ndarray, matrix: np.ndarray, graphs: Path) -> tuple[Any, dict]:
    Index = vector_index._usearch_index()
    path = graphs / f"{name}-{len(pks)}.usearch"
    info: dict[str, Any] = {}
    if path.exists():
        index = Index.restore(str(path))
        info["build_s"] = json.loads(path.with_suffix(".json").read_text())["build_s"]
    else:
        connectivity, dtype, add = variant(name)
        index = Index(ndim=matrix.shape[1], metric="cos", dtype=dtype,
                      connectivity=connectivity, expansion_add=add)  # fmt: skip
        started = time.perf_counter()
        for start in range(0, len(pks), vector_index.BUILD_CHUNK):
            end = start + vector_index.BUILD_CHUNK
            index.add(pks[start:end], matrix[start:end], threads=os.cpu_count() or 1)
        info["build_s"] = round(time.perf_counter() - started, 1)
        index.save(str(path))
        path.with_suffix(".json").write_text(json.dumps(info))
    info["file_mb"] = round(path.stat().st_size / 1e6, 1)
    info["memory_mb"] = round(index.memory_usage / 1e6, 1)
    info["kernel"] = index.hardware_acceleration
    return index, info


def alternated(args: argparse.Namespace, queries: np.ndarray, pks: np.ndarray,
               matrix: np.ndarray, growth: float) -> dict[str, list[float]]:  # fmt: skip
    """The walk's thread CPU (ms a walk) of each ``graph:per`` of ``--alternate``, one pass
    of every pair in turn per round, so the machine's load falls on all of them alike."""
    pairs = [pair.split(":") for pair in args.alternate.split(",")]
    graphs = {name: graph(name, pks, matrix, args.graphs)[0] for name, _ in pairs}
    times: dict[str, list[float]] = {f"{n}:{p}": [] for n, p in pairs}
    for round_ in range(args.rounds + 1):
        for name, per in pairs:
            index, beam = graphs[name], int(float(per) * CANDIDATES * growth)
            index.expansion_search = beam
            started = time.thread_time()
            for q in queries:
                index.search(q, beam)
            if round_:  # the first round is untimed
                times[f"{name}:{per}"].append(
                    round((time.thread_time() - started) * 1000 / len(queries), 2)
                )
    for key, values in times.items():
        print(key, values, "median", round(float(np.median(values)), 2), flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument("--variants", default="c16-i8-e384")
    parser.add_argument("--per", default="1,1.25,1.5,2")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", default="../shared/benchmarks", type=Path)
    parser.add_argument("--graphs", default=Path("/tmp/annbeam-graphs"), type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--alternate", help="graph:per pairs (c16-i8-e384:1.5,...) of graphs"
                        " already built, timed in turn, round after round")  # fmt: skip
    args = parser.parse_args()
    args.graphs.mkdir(parents=True, exist_ok=True)
    model = resolve_embedder("local")
    questions = question_sample(args.data, args.questions, args.seed)
    queries = np.stack([np.asarray(model.embed_query(q), dtype=np.float32) for q in questions])
    pks, matrix = load_vectors(args.store)
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    order = np.argsort(-(queries @ unit.T), axis=1, kind="stable")[:, :CANDIDATES]
    exact = pks[order]
    growth = max(1.0, len(pks) / ann_beam.EXPANSION_REFERENCE_ROWS)
    report: dict[str, Any] = {"rows": len(pks), "questions": len(questions),
                              "load": os.getloadavg()[0], "variants": {}}  # fmt: skip
    if args.alternate:
        report["alternated"] = alternated(args, queries, pks, matrix, growth)
        args.variants = ""
    for name in filter(None, args.variants.split(",")):
        index, info = graph(name, pks, matrix, args.graphs)
        info["rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3)
        for per in (float(p) for p in args.per.split(",")):
            beam = int(per * CANDIDATES * growth)
            index.expansion_search = beam
            found = []
            for q in queries:  # untimed pass
                found.append(np.asarray(index.search(q, beam).keys, dtype=np.int64)[:CANDIDATES])
            cpu = []
            for _ in range(args.rounds):
                started = time.thread_time()
                for q in queries:
                    index.search(q, beam)
                cpu.append((time.thread_time() - started) * 1000 / len(queries))
            row: dict[str, Any] = {"beam": beam, "walk_ms": [round(c, 2) for c in cpu]}
            for k in (10, KEPT, CANDIDATES):
                hits = [len(np.intersect1d(e[:k], f)) for e, f in zip(exact, found, strict=True)]
                row[f"recall@{k}"] = round(float(np.mean(hits)) / k, 4)
                row[f"all{k}"] = int(sum(h == k for h in hits))
            info[f"x{per}"] = row
            print(name, per, row, flush=True)
        report["variants"][name] = info
        print(name, {k: v for k, v in info.items() if not k.startswith("x")}, flush=True)
        del index
    print_json(report, args.out)


if __name__ == "__main__":
    main()
