"""Two versions of ``recalld serve`` under the load bench's clients, their runs alternated
(an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_serve_ab.py --store STORE.db \\
        --base-src /tmp/base/src [--workers 2] [--clients 32] [--seconds 10] [--pairs 2] \\
        [--rates 70,90] [--capacity] [--data ../shared/benchmarks] [--out report.json]

``--store`` a store ``recalld bench scale`` built (its 50 questions are the load bench's);
``--base-src`` the ``src`` folder of the other version (``git archive REV src | tar -x``;
this tree's own for two settings of one version, ``--env-base`` / ``--env-new``).
One server of each version runs on the store (``--workers N``, this tree's and the base's,
both up at once); each pair runs every measure on one then the other (the order reversed
every other pair): clients sending freely, then clients on a schedule at each of
``--rates``. With ``--capacity N`` each version then gets :func:`load.capacity` (p99 within
``--p99-ms``, from the best free rate of either) N times, in turns. With ``--splits N``
first: N times, 32 connections opened at once and the connections each worker holds after
one and after five requests on each. Each row: searches/s, p50/p99, the server's CPU a
search, the clients' CPU a search, each worker's answers, the load average.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_load_client import questions, row_of

from recalld.bench import load
from recalld.bench.report import write_json


def split(url: str, clients: int, requests: int) -> list[int]:
    """``clients`` kept connections opened at once (as :func:`load.measure` opens them),
    each sending ``requests`` health checks in turn: the connections each worker held at
    the last one, largest first."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from recalld.bench.load_client import Connection

    ready = Barrier(clients)

    def one(_: int) -> str:
        with Connection(url, load.REQUEST_TIMEOUT_S) as http:
            health = http.request("GET", "/healthz")
            worker = http.send(health).worker
            ready.wait()
            for _ in range(requests - 1):
                ready.wait()  # every connection answered once more, then the next round
                worker = http.send(health).worker
            ready.wait()
            return worker

    with ThreadPoolExecutor(clients) as pool:
        workers = list(pool.map(one, range(clients)))
    return sorted(Counter(workers).values(), reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--base-src", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--rates", default="")
    parser.add_argument("--capacity", type=int, default=0, metavar="ROUNDS")
    parser.add_argument("--splits", type=int, default=0)
    parser.add_argument("--env-base", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--env-new", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--p99-ms", type=float, default=150.0)
    parser.add_argument("--data", default="../shared/benchmarks")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    asked = questions(Path(args.data))
    rates = [float(r) for r in args.rates.split(",") if r]
    here = str(Path(__file__).resolve().parents[1] / "src")
    sources = {"base": str(Path(args.base_src).resolve()), "new": here}
    runs: list[dict[str, Any]] = []
    found: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        folder = Path(tmp)
        urls: dict[str, str] = {}
        for name, src in sources.items():
            env = load.server_env(
                args.store, "local", folder, RECALLD_CACHE_DIR=str(folder / "serve-cache")
            )
            env["PYTHONPATH"] = src
            env.update(pair.split("=", 1) for pair in getattr(args, f"env_{name}"))
            urls[name] = stack.enter_context(
                load.served(env, folder / f"serve-{name}.log", args.workers)
            )
        splits: dict[str, list[list[int]]] = {name: [] for name in urls}
        for trial in range(args.splits):
            for name, url in urls.items():
                for requests in (1, 5):
                    seen = split(url, args.clients, requests)
                    splits[name].append(seen)
                    print(json.dumps({"split": trial, "version": name, "requests": requests,
                                      "connections": seen}), flush=True)  # fmt: skip
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
        for turn in range(args.capacity):
            ceiling = max(r["searches_per_s"] for r in runs if r["rate"] is None)
            order = list(urls.items())
            for name, url in order if turn % 2 == 0 else order[::-1]:
                result = load.capacity(url, args.clients, args.seconds, asked, args.p99_ms, ceiling)
                best = result["best"]
                one = {
                    "round": turn + 1,
                    "held_searches_per_s": round(best["searches_per_s"], 1) if best else None,
                    "tries": [
                        {"rate": round(t["rate"], 1), "held": t["held"], **row_of(t)}
                        for t in result["tries"]
                    ],
                }
                found.setdefault(name, []).append(one)
                print(json.dumps({"version": name, **one}), flush=True)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "sources": sources,
        "store": args.store,
        "workers": args.workers,
        "clients": args.clients,
        "seconds": args.seconds,
        "splits": splits,
        "env": {"base": args.env_base, "new": args.env_new},
        "runs": runs,
        "capacity": found,
    }
    if args.out:
        write_json(report, Path(args.out))


if __name__ == "__main__":
    sys.exit(main())
