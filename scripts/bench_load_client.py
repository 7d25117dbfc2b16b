"""What the load bench's own clients cost, two versions of ``recalld.bench.load`` alternated
against one server (an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_load_client.py --store STORE.db \\
        [--base 0d4c33a] [--workers 2] [--clients 32] [--seconds 10] [--pairs 2] \\
        [--rate R] [--data ../shared/benchmarks] [--out report.json]

``--store`` a store ``recalld bench scale`` built (its 50 questions are the load bench's,
chosen as it chooses them); ``--base`` a git revision whose ``src/recalld/bench/load.py``
is the old client. One ``recalld serve --workers N`` (this tree's) runs on the store; each
pair runs the old client's :func:`measure` then this tree's (or the reverse, alternating),
each for ``--seconds``, and reports for each: searches/s, p50/p99, the server's CPU a search
and this process's CPU a search (the clients' threads: the only work it does meanwhile).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from recalld.bench import load
from recalld.bench.report import write_json
from recalld.bench.scale_corpus import read_sources


def old_load(base: str, folder: Path) -> ModuleType:
    """``recalld.bench.load`` as it was at ``base``, imported under another name."""
    path = folder / "old_load.py"
    path.write_text(
        subprocess.run(
            ["git", "show", f"{base}:src/recalld/bench/load.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    spec = importlib.util.spec_from_file_location("old_load", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def questions(data: Path, count: int = 50, seed: int = 7) -> list[str]:
    """The questions ``recalld bench scale`` searches with (its defaults)."""
    source = read_sources(data)
    picked = np.random.default_rng(seed).choice(len(source.questions), count, replace=False)
    return [source.questions[i] for i in sorted(picked)]


def row_of(measured: dict[str, Any], client_ms: float | None = None) -> dict[str, Any]:
    """A row of the report: ``measured``'s figures (of ``load.measure``) rounded, the
    clients' CPU a search ``client_ms`` when given (else ``measured``'s own)."""
    client = measured["client_cpu_ms_per_search"] if client_ms is None else client_ms
    return {
        "searches_per_s": round(measured["searches_per_s"], 1),
        "p50_ms": round(measured["p50_ms"], 1),
        "p99_ms": round(measured["p99_ms"], 1),
        "errors": measured["errors"],
        "server_cpu_ms_per_search": round(measured["server_cpu_ms_per_search"] or 0, 2),
        "client_cpu_ms_per_search": round(client or 0, 2),
        "per_worker": measured["per_worker"],
        "load_avg": round(os.getloadavg()[0], 2),
    }


def one(module: ModuleType, url: str, args: argparse.Namespace, asked: list[str]) -> dict[str, Any]:
    own = time.process_time()
    row = module.measure(url, args.clients, args.seconds, asked, rate=args.rate)
    client_ms = (
        (time.process_time() - own) * 1000 / max(1, int(row["searches_per_s"] * row["seconds"]))
    )
    return row_of(row, client_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--base", default="0d4c33a")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--data", default="../shared/benchmarks")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    asked = questions(Path(args.data))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        old = old_load(args.base, folder)
        env = load.server_env(
            args.store, "local", folder, RECALLD_CACHE_DIR=str(folder / "serve-cache")
        )
        with load.served(env, folder / "serve.log", args.workers) as url:
            old._serving[url] = load._serving[url]
            load.warm(url, asked, workers=args.workers)
            for pair in range(args.pairs):
                order = [("old", old), ("new", load)]
                for name, module in order if pair % 2 == 0 else order[::-1]:
                    row = {"pair": pair + 1, "client": name, **one(module, url, args, asked)}
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "base": args.base,
        "store": args.store,
        "workers": args.workers,
        "clients": args.clients,
        "seconds": args.seconds,
        "rate": args.rate,
        "runs": runs,
    }
    if args.out:
        write_json(report, Path(args.out))


if __name__ == "__main__":
    sys.exit(main())
