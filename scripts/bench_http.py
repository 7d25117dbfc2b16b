"""Search over HTTP against a warm `recalld serve`, beside the same search in process.

Builds a store from one LongMemEval_S question's haystack (every turn of its ~50 sessions,
embedded with the real packaged model), then times `POST /v1/search` against a
`recalld serve` subprocess on 127.0.0.1 (query embedding included: every query is new to
the server) and `engine.run_search` in this process on the same store, same queries, same
order; then the throughput of 8 concurrent HTTP clients.

    PYTHONPATH=src .venv/bin/python scripts/bench_http.py \
        /work/shared/benchmarks/longmemeval/longmemeval_s.json.gz --question 0 --json out.json

Prints a Markdown table (and writes the JSON with --json). Not a test: figures depend on
the machine and its load, which the report records (`os.getloadavg`).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import recalld
from recalld.bench.load import answers
from recalld.config import Settings
from recalld.providers.embedders import resolve_embedder
from recalld.requests import ImportRequest, SearchQuery, parse


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def stats(ms: list[float]) -> dict[str, float]:
    arr = np.array(ms)
    return {"p50_ms": round(float(np.percentile(arr, 50)), 2),
            "p95_ms": round(float(np.percentile(arr, 95)), 2),
            "mean_ms": round(float(arr.mean()), 2), "n": len(ms)}  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def build(records: list[Any], index: int, db: Path) -> tuple[int, list[str]]:
    """Import question ``index``'s haystack; the queries are the questions of the file."""
    record = records[index]
    settings = Settings(db=db, cache_dir=None)
    with recalld.open(settings=settings) as engine:
        report = engine.run_import(
            parse(ImportRequest, {"format": "longmemeval", "content": json.dumps([record])})
        )
    queries = [str(r["question"]) for r in records if r.get("question")]
    return report.stored, queries


def timed_passes(
    db: Path, base: str, queries: list[str], limit: int, passes: int
) -> dict[str, list[float]]:
    """Each pass times every query in process, then over HTTP, per mode (interleaved, so
    that a change in the machine's load falls on both paths alike)."""
    settings = Settings(db=db, cache_dir=None)
    embedder = resolve_embedder("local", settings)
    times: dict[str, list[float]] = {}
    with (recalld.open(settings=settings, embedder=embedder) as engine,
          httpx.Client(base_url=base, timeout=60) as client):  # fmt: skip
        engine.run_search(parse(SearchQuery, {"query": "warm up", "limit": limit}))
        client.post("/v1/search", json={"query": "warm up", "limit": limit}).raise_for_status()
        for _ in range(passes):
            for mode in ("vector", "hybrid"):
                local = times.setdefault(f"in_process_{mode}", [])
                for query in queries:
                    request = parse(SearchQuery, {"query": query, "limit": limit, "mode": mode})
                    started = time.perf_counter()
                    engine.run_search(request)
                    local.append((time.perf_counter() - started) * 1000)
                remote = times.setdefault(f"http_{mode}", [])
                for query in queries:
                    body = {"query": query, "limit": limit, "mode": mode}
                    started = time.perf_counter()
                    client.post("/v1/search", json=body).raise_for_status()
                    remote.append((time.perf_counter() - started) * 1000)
    return times


def concurrent(base: str, queries: list[str], limit: int, clients: int) -> dict[str, Any]:
    """``clients`` threads, each with its own connection, share the queries once."""
    times: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    chunks = [queries[i::clients] for i in range(clients)]

    def worker(chunk: list[str]) -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            for query in chunk:
                started = time.perf_counter()
                try:
                    answer = client.post("/v1/search", json={"query": query, "limit": limit})
                    answer.raise_for_status()
                except httpx.HTTPError as exc:
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    continue
                with lock:
                    times.append((time.perf_counter() - started) * 1000)

    threads = [threading.Thread(target=worker, args=(c,)) for c in chunks]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    wall = time.perf_counter() - started
    return {"clients": clients, "searches": len(times), "errors": errors[:5],
            "failed": len(errors), "seconds": round(wall, 2),
            "per_second": round(len(times) / wall, 1), **stats(times)}  # fmt: skip


def serve(db: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    env.update(RECALLD_DB=str(db), RECALLD_HTTP_RATE_LIMIT="0",
               PYTHONPATH=str(Path(recalld.__file__).resolve().parents[1]))  # fmt: skip
    command = [str(Path(sys.executable).parent / "recalld"), "serve", "--port", str(port)]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    if answers(f"http://127.0.0.1:{port}", process, 120):
        return process
    process.kill()
    raise SystemExit(f"recalld serve did not start: {process.communicate()[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--question", type=int, default=0)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--passes",
        type=int,
        default=3,
        help="Times each query is asked per path (no query cache exists).",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--db", type=Path, help="Reuse a store an earlier run built (skips the import)."
    )
    args = parser.parse_args()

    opener = gzip.open if args.file.suffix == ".gz" else open
    with opener(args.file, "rt", encoding="utf-8") as handle:
        records = json.load(handle)
    started = time.perf_counter()
    if args.db is not None:
        db = args.db
        with recalld.open(settings=Settings(db=db, cache_dir=None)) as engine:
            stored = engine.status().store.memories
        questions = [str(r["question"]) for r in records if r.get("question")]
    else:
        db = Path(tempfile.mkdtemp(prefix="recalld-bench-http-")) / "memory.db"
        stored, questions = build(records, args.question, db)
    queries = questions[: args.queries]
    del records  # the haystacks are millions of objects: every GC pass would walk them
    gc.collect()
    report: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "file": str(args.file),
        "question": args.question, "memories": stored, "queries": len(queries),
        "passes": args.passes,
        "limit": args.limit, "build_seconds": round(time.perf_counter() - started, 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }  # fmt: skip
    port = free_port()
    process = serve(db, port)
    base = f"http://127.0.0.1:{port}"
    try:
        report["load_before"] = load()
        timings = timed_passes(db, base, queries, args.limit, args.passes)
        report.update({name: stats(ms) for name, ms in timings.items()})
        report["load_between"] = load()
        with httpx.Client(base_url=base, timeout=60) as client:
            ticks = []
            for _ in range(200):
                started = time.perf_counter()
                client.get("/healthz").raise_for_status()
                ticks.append((time.perf_counter() - started) * 1000)
        report["http_round_trip_healthz"] = stats(ticks)
        report["concurrent"] = concurrent(base, queries * args.passes, args.limit, args.clients)
        report["load_after"] = load()
    finally:
        process.terminate()
        process.communicate(timeout=30)
    rows = ["| path | mode | p50 ms | p95 ms | mean ms |", "|---|---|---|---|---|"]
    for mode in ("vector", "hybrid"):
        for where in ("in_process", "http"):
            s = report[f"{where}_{mode}"]
            rows.append(f"| {where.replace('_', ' ')} | {mode} | {s['p50_ms']} | {s['p95_ms']}"
                        f" | {s['mean_ms']} |")  # fmt: skip
    t = report["http_round_trip_healthz"]
    rows.append(f"| http round trip (/healthz, no search) | - | {t['p50_ms']} | {t['p95_ms']}"
                f" | {t['mean_ms']} |")  # fmt: skip
    c = report["concurrent"]
    rows.append(
        f"\n{c['clients']} concurrent HTTP clients (auto mode): {c['per_second']} "
        f"searches/s, p50 {c['p50_ms']} ms, p95 {c['p95_ms']} ms over {c['searches']}"
    )
    print("\n".join(rows))
    print(
        f"memories {stored}, load before {report['load_before']}, after "
        f"{report['load_after']}, {report['date']}"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
