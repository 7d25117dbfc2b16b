"""The server's CPU per search beyond the search itself, two versions of the code
alternated in one run (an experiment, not a test).

    PYTHONPATH=src .venv/bin/python scripts/bench_server_cpu.py --store STORE.db \\
        --base main --new HEAD [--pairs 3] [--rounds 4] [--doors v1,v1x32,mcp] \\
        [--data ../shared/benchmarks] [--out report.json]

``--base`` and ``--new`` are git revisions (extracted with ``git archive``) or folders holding
a ``src/``; ``--store`` a store ``recalld bench scale`` built (its 50 questions are the load
bench's). For each pair, each door and each version in turn, a fresh process runs the app
of ``create_app`` under uvicorn (one worker, the MCP tools mounted), its clients in another
process sending ``--rounds`` x 50 searches (limit 10, as the load bench): ``v1`` one client
on ``/v1/search``, ``v1x32`` 32 clients, ``mcp`` one client calling ``memory_search`` on
``/mcp/``. It reports per search: the server's CPU (every thread of its process), the
search's own (``MemoryEngine.run_search``'s thread CPU), the difference, and the event
loop's thread alone (from ``/proc``: Linux only; ticks of 10 ms, so 0.05 ms at 200
searches). On a shared machine the search itself moves with the load; the difference is
what the server adds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_code_ab import source_of

DOORS = {"v1": ("v1", 1), "v1x32": ("v1", 32), "mcp": ("mcp", 1)}
"""A door's name: the path it searches through and its clients."""

SERVER = r"""
import json, os, subprocess, sys, threading, time
import httpx, uvicorn, recalld
from recalld import heap
from recalld.engine import MemoryEngine
from recalld.interfaces.cli_mcp import mcp_tools
from recalld.interfaces.connections import BoundedServer, bounds
from recalld.interfaces.http import create_app
from recalld.ports import free_port
client, door, clients, rounds, data = sys.argv[1:6]
searched = [0, 0.0]
plain = MemoryEngine.run_search
def timed(self, *args, **kwargs):
    started = time.thread_time()
    try:
        return plain(self, *args, **kwargs)
    finally:
        searched[0] += 1
        searched[1] += time.thread_time() - started
MemoryEngine.run_search = timed
settings = recalld.load_settings({}, config_file=None)
app = create_app(settings, extensions=[mcp_tools().mcp_extension])
port = free_port()
config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **bounds(None))
server = BoundedServer(config)
heap.settle()
threading.Thread(target=server.run, daemon=True, name="loop").start()
url = f"http://127.0.0.1:{port}"
while True:
    try:
        if httpx.get(url + "/healthz").status_code == 200:
            break
    except httpx.TransportError:
        time.sleep(0.1)
def threads():
    tick, found = os.sysconf("SC_CLK_TCK"), {}
    for task in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{task}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(task)] = (int(fields[11]) + int(fields[12])) / tick
    return found
loads = subprocess.Popen([sys.executable, "-c", client, url, door, clients, rounds, data],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert loads.stdout.readline().strip() == "ready"
searched[:] = [0, 0.0]
before, cpu = threads(), time.process_time()
loads.stdin.write("go\n"); loads.stdin.flush()
assert loads.wait() == 0
cpu, after = time.process_time() - cpu, threads()
loop = next(t.native_id for t in threading.enumerate() if t.name == "loop")
n = searched[0]
print(json.dumps({
    "searches": n, "server_ms": cpu * 1000 / n, "search_ms": searched[1] * 1000 / n,
    "beyond_ms": (cpu - searched[1]) * 1000 / n,
    "loop_ms": (after[loop] - before.get(loop, 0.0)) * 1000 / n, "load": os.getloadavg()[0],
}))
server.should_exit = True
"""

CLIENT = r"""
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import httpx
from recalld.bench.scale_worker import question_sample
url, door, clients, rounds, data = sys.argv[1:6]
clients, rounds = int(clients), int(rounds)
questions = question_sample(Path(data), 50, 7)
https = [httpx.Client(base_url=url, timeout=60) for _ in range(clients)]
def search(http, question):
    if door == "mcp":
        call = {"name": "memory_search", "arguments": {"query": question, "limit": 10}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
        accept = {"Accept": "application/json, text/event-stream"}
        answer = http.post("/mcp/", json=body, headers=accept)
        ok = answer.status_code == 200 and '"isError":false' in answer.text.replace(" ", "")
        assert ok, answer.text[:300]
    else:
        assert http.post("/v1/search", json={"query": question, "limit": 10}).status_code == 200
for question in questions[:20]:
    search(https[0], question)
for http in https:
    http.get("/healthz")
print("ready", flush=True)
sys.stdin.readline()
def client(n):
    for r in range(rounds):
        for i, question in enumerate(questions):
            if (i + r) % clients == n:
                search(https[n], question)
with ThreadPoolExecutor(clients) as pool:
    list(pool.map(client, range(clients)))
"""

FIGURES = ("server_ms", "search_ms", "beyond_ms", "loop_ms")


def run_once(src: Path, door: str, args: argparse.Namespace) -> dict[str, Any]:
    path, clients = DOORS[door]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    config = Path(tempfile.mkdtemp(prefix="server-cpu-")) / "empty.toml"
    config.write_text("", encoding="utf-8")
    env.update(
        PYTHONPATH=str(src),
        RECALLD_DB=str(args.store),
        RECALLD_EMBEDDER=args.embedder,
        RECALLD_CONFIG=str(config),
        RECALLD_HTTP_RATE_LIMIT="1000000",
    )
    argv = [SERVER, CLIENT, path, str(clients), str(args.rounds), str(args.data)]
    done = subprocess.run(
        [sys.executable, "-c", *argv], env=env, check=True, capture_output=True, text=True
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--base", default="main")
    parser.add_argument("--new", default="HEAD")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--doors", default="v1,v1x32,mcp")
    parser.add_argument("--embedder", default="local")
    parser.add_argument("--data", type=Path, default=Path("../shared/benchmarks"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    doors = [d for d in args.doors.split(",") if d]
    started, load_before = datetime.now(UTC).isoformat(timespec="seconds"), os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        sources = {v: source_of(getattr(args, v), Path(folder)) for v in ("base", "new")}
        runs: list[dict[str, Any]] = []
        for pair in range(1, args.pairs + 1):
            for door in doors:
                for version, src in sources.items():
                    row = {"pair": pair, "door": door, "version": version}
                    row.update(run_once(src, door, args))
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    summary = {
        f"{door} {version}": {
            figure: statistics.mean(
                r[figure] for r in runs if r["door"] == door and r["version"] == version
            )
            for figure in FIGURES
        }
        for door in doors
        for version in sources
    }
    for name, figures in summary.items():
        print(name, " ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    if args.out:
        report = {
            "command": " ".join(["scripts/bench_server_cpu.py", *sys.argv[1:]]),
            "date": started,
            "load_average": [load_before, os.getloadavg()],
            "base": args.base,
            "new": args.new,
            "runs": runs,
            "mean": summary,
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
