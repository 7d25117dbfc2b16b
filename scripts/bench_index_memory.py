"""Peak memory of `recalld index` on a generated markdown workspace (not a test).

    python scripts/bench_index_memory.py --mb 0.328 --mb 30 [--recalld .venv/bin/recalld]
        [--embedder local] [--env RECALLD_EMBED_BATCH_TOKENS=8192] [--out result.json]

For each size, writes a deterministic workspace (MEMORY.md plus dated daily notes, the
generator of scripts/bench_index.py) to a temporary folder, runs ``recalld index`` on it in a
child process with a fresh store and the embedding cache off, and reports the child's peak
resident memory (``ru_maxrss``), wall time, chunks and the load average. ``--recalld`` picks
the entry point (another checkout's, to compare before and after); ``--env`` sets a variable
for the child (repeatable).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_index import generate  # noqa: E402


def measure(
    recalld: str, megabytes: float, embedder: str, env: dict[str, str]
) -> dict[str, object]:
    """Index a fresh workspace of ``megabytes`` in a child; its peak RSS and timings."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        files, size = generate(root, megabytes)
        child_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")},
            "RECALLD_DB": str(Path(tmp) / "index.db"),
            "RECALLD_CACHE_DIR": str(Path(tmp) / "cache"),
            "RECALLD_CONFIG": str(Path(tmp) / "none.toml"),
            "RECALLD_EMBEDDER": embedder,
            **env,
        }
        Path(child_env["RECALLD_CONFIG"]).write_text("", encoding="utf-8")
        load = os.getloadavg()[0]
        started = time.perf_counter()
        out, err = Path(tmp) / "out.json", Path(tmp) / "err.txt"
        with out.open("w") as stdout, err.open("w") as stderr:
            child = subprocess.Popen([recalld, "--json", "index", str(root)], env=child_env,
                                     stdout=stdout, stderr=stderr)  # fmt: skip
            # wait4: this child's own peak, not the largest of every child so far
            _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        if status != 0:
            raise SystemExit(f"recalld index failed: {err.read_text()}")
        report = json.loads(out.read_text())
        return {
            "mb": round(size / 1e6, 3), "files": files, "chunks": report["chunks_added"],
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "wall_s": round(seconds, 1),
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
        }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, action="append", help="workspace size (repeatable)")
    parser.add_argument("--recalld", default=str(Path(sys.executable).parent / "recalld"))
    parser.add_argument("--embedder", default="local")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the child")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    results = []
    for mb in args.mb or [0.328]:
        result = measure(args.recalld, mb, args.embedder, env)
        result.update(recalld=args.recalld, embedder=args.embedder, env=env)
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.out:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        args.out.write_text(json.dumps({"date": stamp, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
