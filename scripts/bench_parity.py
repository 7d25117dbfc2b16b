"""Backend parity on LongMemEval_S and LoCoMo (issue 16 §4): the same search gives the same
ids in the same order, scores within float tolerance, on SQLite and PostgreSQL.

For every case (a LongMemEval question's haystack, a LoCoMo conversation) both backends
are filled through the benchmarks' own path (``longmemeval_case`` / ``locomo_case``, then
``add_many(dedupe=False)`` on a fresh store: a SQLite file and a fresh PostgreSQL
database), with the real embedder behind the embedding cache; every question's default
search (hybrid, limit 10, the question's date as ``as_of``) runs on both. Then the SQLite
store goes SQLite -> PostgreSQL -> SQLite with ``recalld migrate``: counts, checksums, and
hybrid and vector top-10 results on the three stores.

    python scripts/bench_parity.py --longmemeval FILE.json.gz --questions 50 \\
        --locomo FILE.json --cache-dir /tmp/benchcache --out docs/reports/parity.json

Starts a local PostgreSQL (``recalld postgres start``) in a temporary folder unless
``--dsn`` names a server (an admin DSN: the script creates and drops databases).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import recalld
from recalld import local_postgres
from recalld.bench.cases import Case
from recalld.bench.locomo import load_locomo, locomo_case
from recalld.bench.longmemeval import load_longmemeval, longmemeval_case, select_questions
from recalld.bench.run_report import load_average, machine
from recalld.bench.scale_postgres import temporary_database
from recalld.bench.systems import load_embedder
from recalld.config import Settings
from recalld.migration import checksum
from recalld.providers.embedders import Embedder, resolve_embedder
from recalld.stores import open_store

LIMIT = 10
TOLERANCE = 1e-6


def _settings(location: str) -> Settings:
    return Settings.model_construct(db=location, cache_dir=None,
                                    max_content_chars=1_000_000)  # fmt: skip


def _results(location: str, case: Case, embedder: Embedder, mode: str | None) -> list[Any]:
    """Each probe's top ids and scores (``mode`` None: the default search), and times."""
    out = []
    with recalld.open(settings=_settings(location), embedder=embedder) as engine:
        for probe in case.probes:
            args: dict[str, Any] = {"as_of": probe.as_of, "limit": LIMIT}
            if mode is not None:
                args["mode"] = mode
            started = time.perf_counter()
            hits = engine.search(probe.question, **args).hits
            took = (time.perf_counter() - started) * 1000
            out.append(([h.memory.id for h in hits], [h.score for h in hits], took))
    return out


def _compare(a: list[Any], b: list[Any]) -> tuple[int, float, list[int]]:
    """Probes with identical ids in order, the max score difference among them, and the
    indexes of the others."""
    same, worst, differ = 0, 0.0, []
    for i, ((ids_a, sc_a, _), (ids_b, sc_b, _)) in enumerate(zip(a, b, strict=True)):
        if ids_a == ids_b:
            same += 1
            worst = max([worst, *(abs(x - y) for x, y in zip(sc_a, sc_b, strict=True))])
        else:
            differ.append(i)
    return same, worst, differ


def _checksum(location: str) -> str:
    store = open_store(location)
    try:
        return checksum(store, "default")[0]
    finally:
        store.close()


def _fill(location: str, case: Case, embedder: Embedder) -> float:
    started = time.perf_counter()
    with recalld.open(settings=_settings(location), embedder=embedder) as engine:
        engine.add_many([d.memory for d in case.docs], dedupe=False)
    return time.perf_counter() - started


def run_case(case: Case, embedder: Embedder, admin: str, folder: Path) -> dict[str, Any]:
    sqlite, back = str(folder / f"{case.case_id}.db"), str(folder / f"{case.case_id}-back.db")
    out: dict[str, Any] = {"case": case.case_id, "memories": len(case.docs),
                           "questions": len(case.probes)}  # fmt: skip
    with temporary_database(admin, "parity") as pg, temporary_database(admin, "parity") as trip:
        out["fill_s"] = {"sqlite": round(_fill(sqlite, case, embedder), 2),
                         "postgres": round(_fill(pg, case, embedder), 2)}  # fmt: skip
        a, b = (_results(x, case, embedder, None) for x in (sqlite, pg))
        same, worst, differ = _compare(a, b)
        out["default_search"] = {
            "identical_top10": same, "max_score_diff": worst,
            "differing": [{"question": case.probes[i].question, "sqlite": a[i][0],
                           "postgres": b[i][0]} for i in differ[:5]],
            "latency_ms": {name: [float(x[2]) for x in r] for name, r in
                           (("sqlite", a), ("postgres", b))},
        }  # fmt: skip
        there = recalld.migrate_store(sqlite, trip)
        again = recalld.migrate_store(trip, back)
        sums = {_checksum(x) for x in (sqlite, trip, back)}
        trip_out: dict[str, Any] = {
            "memories": [there.memories, again.memories],
            "with_vectors": [there.with_vectors, again.with_vectors],
            "checksums_equal": len(sums) == 1 and there.checksum == again.checksum,
        }
        for mode in ("hybrid", "vector"):
            r = [_results(x, case, embedder, mode) for x in (sqlite, trip, back)]
            s1, w1, _ = _compare(r[0], r[1])
            s2, w2, _ = _compare(r[0], r[2])
            trip_out[mode] = {"identical_sqlite_postgres": s1, "identical_sqlite_back": s2,
                              "max_score_diff": max(w1, w2)}  # fmt: skip
        out["round_trip"] = trip_out
    for path in (sqlite, back):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
    return out


def summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    questions = sum(c["questions"] for c in cases)
    lat = {k: np.array([x for c in cases for x in c["default_search"]["latency_ms"][k]])
           for k in ("sqlite", "postgres")}  # fmt: skip
    return {
        "cases": len(cases),
        "memories": sum(c["memories"] for c in cases),
        "questions": questions,
        "default_identical_top10": sum(c["default_search"]["identical_top10"] for c in cases),
        "default_max_score_diff": max(c["default_search"]["max_score_diff"] for c in cases),
        "search_ms_p50_p95": {
            k: [round(float(np.percentile(v, p)), 1) for p in (50, 95)]
            for k, v in lat.items()
            if len(v)
        },  # fmt: skip
        "round_trip_counts_equal": all(
            c["round_trip"]["memories"][0] == c["round_trip"]["memories"][1] == c["memories"]
            for c in cases
        ),  # fmt: skip
        "round_trip_checksums_equal": all(c["round_trip"]["checksums_equal"] for c in cases),
        **{
            f"round_trip_{mode}_identical": [
                sum(c["round_trip"][mode]["identical_sqlite_postgres"] for c in cases),
                sum(c["round_trip"][mode]["identical_sqlite_back"] for c in cases),
            ]
            for mode in ("hybrid", "vector")
        },  # fmt: skip
        "round_trip_max_score_diff": max(
            max(c["round_trip"][m]["max_score_diff"] for m in ("hybrid", "vector")) for c in cases
        ),  # fmt: skip
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--longmemeval", type=Path)
    parser.add_argument("--questions", type=int, default=50,
                        help="LongMemEval: the first N questions (a store each)")  # fmt: skip
    parser.add_argument("--locomo", type=Path)
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--dsn", help="an admin DSN (default: a local server in a temp dir)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    embedder = load_embedder(resolve_embedder("local"), args.cache_dir)
    folder = Path(tempfile.mkdtemp(prefix="recalld-parity-"))
    admin = args.dsn or local_postgres.start(folder / "pg").admin_dsn
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(), "load_average": {"start": load_average()},
        "embedder": embedder.fingerprint.describe(), "limit": LIMIT,
        "tolerance": TOLERANCE, "benchmarks": {},
    }  # fmt: skip
    try:
        benches: list[tuple[str, str, list[Case]]] = []
        if args.longmemeval:
            chosen = select_questions(load_longmemeval(args.longmemeval),
                                      limit=args.questions)  # fmt: skip
            benches.append(("longmemeval_s", str(args.longmemeval),
                            [longmemeval_case(q) for q in chosen]))  # fmt: skip
        if args.locomo:
            conversations = load_locomo(args.locomo)[: args.conversations]
            benches.append(("locomo", str(args.locomo),
                            [locomo_case(c) for c in conversations]))  # fmt: skip
        for name, path, cases in benches:
            started, done = time.perf_counter(), []
            for case in cases:
                done.append(run_case(case, embedder, admin, folder))
                d = done[-1]["default_search"]
                print(f"{name} {case.case_id}: {d['identical_top10']}/{done[-1]['questions']}"
                      f" identical, max diff {d['max_score_diff']:.2e}", flush=True)  # fmt: skip
            report["benchmarks"][name] = {"file": path, "summary": summary(done),
                                          "seconds": round(time.perf_counter() - started),
                                          "cases": done}  # fmt: skip
            print(name, json.dumps(report["benchmarks"][name]["summary"]), flush=True)
    finally:
        report["load_average"]["end"] = load_average()
        if not args.dsn:
            local_postgres.stop(folder / "pg")
        if args.out:
            args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
