"""Two versions of ``recalld serve`` under the load bench's clients, their runs alternated
(an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_serve_ab.py --store STORE.db \\
        --base-src /tmp/base/src [--workers 2] [--clients 32] [--seconds 10] [--pairs 2] \\
        [--rates 70,90] [--capacity] [--data ../shared/benchmarks] [--out report.json]

``--store`` a store ``recalld bench scale`` built (its 50 questions are the load bench's);
``--base-src`` the ``src`` folder of the other version (``git archive REV src | tar -x``).
One server of each version runs on the store (``--workers N``, this tree's and the base's,
both up at once); each pair runs every measure on one then the other (the order reversed
every other pair): clients sending freely, then clients on a schedule at each of
``--rates``. With ``--capacity`` each version then gets :func:`load.capacity` (p99 within
``--p99-ms``). Each row: searches/s, p50/p99, the server's CPU a search, the clients' CPU a
search, each worker's answers, the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_load_client import questions

from recalld.bench import load
from recalld.bench.report import write_json


def row_of(measured: dict[str, Any]) -> dict[str, Any]:
    return {
        "searches_per_s": round(measured["searches_per_s"], 1),
        "p50_ms": round(measured["p50_ms"], 1),
        "p99_ms": round(measured["p99_ms"], 1),
        "errors": measured["errors"],
        "server_cpu_ms_per_search": round(measured["server_cpu_ms_per_search"] or 0, 2),
        "client_cpu_ms_per_search": round(measured["client_cpu_ms_per_search"] or 0, 2),
        "per_worker": measured["per_worker"],
        "load_avg": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--base-src", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--rates", default="")
    parser.add_argument("--capacity", action="store_true")
    parser.add_argument("--p99-ms", type=float, default=150.0)
    parser.add_argument("--data", default="../shared/benchmarks")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    asked = questions(Path(args.data))
    rates = [float(r) for r in args.rates.split(",") if r]
    here = str(Path(__file__).resolve().parents[1] / "src")
    sources = {"base": str(Path(args.base_src).resolve()), "new": here}
    runs: list[dict[str, Any]] = []
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        folder = Path(tmp)
        urls: dict[str, str] = {}
        for name, src in sources.items():
            env = load.server_env(
                args.store, "local", folder, RECALLD_CACHE_DIR=str(folder / "serve-cache")
            )
            env["PYTHONPATH"] = src
            urls[name] = stack.enter_context(
                load.served(env, folder / f"serve-{name}.log", args.workers)
            )
        for url in urls.values():
            load.warm(url, asked, workers=args.workers)
        for pair in range(args.pairs):
            order = list(urls.items())
            for rate in [None, *rates]:
                for name, url in order if pair % 2 == 0 else order[::-1]:
                    measured = load.measure(url, args.clients, args.seconds, asked, rate=rate)
                    row = {"pair": pair + 1, "version": name, "rate": rate, **row_of(measured)}
                    runs.append(row)
                    print(json.dumps(row), flush=True)
        if args.capacity:
            ceiling = {
                name: max(r["searches_per_s"] for r in runs if r["version"] == name)
                for name in urls
            }
            for name, url in urls.items():
                result = load.capacity(
                    url, args.clients, args.seconds, asked, args.p99_ms, ceiling[name]
                )
                best = result["best"]
                found[name] = {
                    "held_searches_per_s": round(best["searches_per_s"], 1) if best else None,
                    "tries": [
                        {"rate": round(t["rate"], 1), "held": t["held"], **row_of(t)}
                        for t in result["tries"]
                    ],
                }
                print(json.dumps({"version": name, **found[name]}), flush=True)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "sources": sources,
        "store": args.store,
        "workers": args.workers,
        "clients": args.clients,
        "seconds": args.seconds,
        "runs": runs,
        "capacity": found,
    }
    if args.out:
        write_json(report, Path(args.out))


if __name__ == "__main__":
    sys.exit(main())
