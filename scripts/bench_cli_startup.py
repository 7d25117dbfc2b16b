"""How fast the shell answers: `recalld` commands beside a bare `python -c pass` (not a test).

    python scripts/bench_cli_startup.py [--rounds 7] [--embedder local] [--out result.json]

In a temporary store with a few memories, runs each of these in a fresh process, rounds
times, interleaved so load changes hit them alike, and reports the median wall time and the
peak resident memory (``ru_maxrss`` of that child):

- ``python -c pass`` (the floor: an interpreter that does nothing);
- ``recalld --help``;
- ``recalld status``;
- ``recalld search QUERY`` in-process (loads the model);
- ``recalld search QUERY`` while a ``recalld serve`` of the same store runs (the request
  goes to it; the model stays in the server).

The package's modules are compiled first (``compileall``), as ``pip install`` does: with
``PYTHONDONTWRITEBYTECODE`` set, an editable install would otherwise compile them on every call.

Targets on a quiet machine: ``--help`` <= 0.25 s; search through the server <= 0.15 s and
<= 80 MB. The load average is recorded before and after; on a busy machine the CPU seconds
(user + system) of each child say more than its wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from recalld.interfaces import local_server
from recalld.ports import free_port

QUERY = "how did we fix the deploy?"
MEMORIES = [
    "The billing deploy broke; pinning psycopg to 3.2 fixed it.",
    "My sister Ana arrives from Porto on the 14th.",
    "The office plants need water every Tuesday.",
]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS in MB, CPU seconds) of one child process."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"{argv} failed: {child.stderr.read() if child.stderr else ''}")
    if child.stderr is not None:
        child.stderr.close()
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--embedder", default="local")
    parser.add_argument("--recalld", default=str(Path(sys.executable).parent / "recalld"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    package = Path(local_server.__file__).parents[1]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                   stdout=subprocess.DEVNULL)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        runtime = Path(tmp) / "runtime"
        runtime.mkdir(mode=0o700)
        config = Path(tmp) / "config.toml"
        config.write_text("", encoding="utf-8")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")},
               "RECALLD_DB": str(Path(tmp) / "bench.db"), "RECALLD_CONFIG": str(config),
               "RECALLD_CACHE_DIR": str(Path(tmp) / "cache"), "RECALLD_EMBEDDER": args.embedder,
               "XDG_RUNTIME_DIR": str(runtime)}  # fmt: skip
        recalld = [args.recalld]
        for memory in MEMORIES:
            subprocess.run([*recalld, "add", memory], env=env, check=True, capture_output=True)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "recalld --help": [*recalld, "--help"],
            "recalld status": [*recalld, "status"],
            "recalld search (in-process)": [*recalld, "search", QUERY],
        }
        load_before = os.getloadavg()
        samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, argv in commands.items():
                samples[name].append(timed(argv, env))
        port = free_port()
        server = subprocess.Popen([*recalld, "serve", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            os.environ["XDG_RUNTIME_DIR"] = str(runtime)
            settings = local_server.search_settings({}, environ=env)
            deadline = time.monotonic() + 180
            while local_server.find(settings) is None:  # up, and serving this store
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("recalld serve did not come up")
                time.sleep(0.2)
            via = "recalld search (via a running server)"
            samples[via] = []
            for _ in range(args.rounds):
                samples[via].append(timed([*recalld, "search", QUERY], env))
                samples["python -c pass"].append(timed(commands["python -c pass"], env))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
        load_after = os.getloadavg()
    rows = {
        name: {"median_s": round(statistics.median(w for w, _, _ in runs), 3),
               "min_s": round(min(w for w, _, _ in runs), 3),
               "median_cpu_s": round(statistics.median(c for _, _, c in runs), 3),
               "peak_rss_mb": round(max(m for _, m, _ in runs), 1), "runs": len(runs)}
        for name, runs in samples.items()
    }  # fmt: skip
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "embedder": args.embedder,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after], "commands": rows,
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
