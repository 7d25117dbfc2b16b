"""MCP search latency against a warm server vs the same search in process (docs/mcp.md).

Builds a store from one LongMemEval_S question's haystack with the real packaged model, then
times ``memory_search`` (query embedding included) for the file's questions:

- in process: ``engine.search`` on a warm engine (on the main thread, and on a worker thread);
- MCP over stdio: ``recalld mcp`` launched as an agent launches it, the SDK's stdio client;
- MCP over streamable HTTP: ``recalld mcp --http`` on a loopback port, the SDK's client;

each query through every path in turn (so a change of load hits them all alike); then the
HTTP server's throughput with 8 concurrent clients.

    .venv/bin/python scripts/bench_mcp.py \
        ../shared/benchmarks/longmemeval/longmemeval_s.json.gz --queries 100 --rounds 2

Prints a Markdown table and the JSON (with the date and the load average before and after).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
from mcp import Client, StdioServerParameters

import recalld
from recalld.bench.longmemeval import load_longmemeval, longmemeval_case
from recalld.config import Settings

LIMIT = 10
CLIENTS = 8


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def summary(ms: list[float]) -> dict[str, float]:
    arr = np.array(ms)
    return {"p50_ms": round(float(np.percentile(arr, 50)), 2),
            "p95_ms": round(float(np.percentile(arr, 95)), 2), "n": len(ms)}  # fmt: skip


def build_store(path: Path, source: Path, question_index: int) -> tuple[Settings, list[Any]]:
    questions = load_longmemeval(source)
    case = longmemeval_case(questions[question_index])
    settings = Settings(db=path, cache_dir=None, embedder="local")
    with recalld.open(settings=settings) as engine:
        engine.add_many([d.memory for d in case.docs], dedupe=False)
    probes = [(q.question, q.question_date) for q in questions]
    return settings, probes


PATHS = ("in_process", "in_process_worker_thread", "mcp_stdio", "mcp_http")
GETS = ("get_in_process", "get_mcp_stdio", "get_mcp_http")
"""``memory_get`` of one id: next to no work, so its time is the transport's own cost."""


async def interleaved(settings: Settings, stdio: Any, url: str, probes: list[Any],
                      rounds: int) -> dict[str, dict[str, float]]:  # fmt: skip
    """Each query through every path in turn, so a change of load hits them all alike.

    In process twice: on the event loop's thread, and on a worker thread as the MCP server
    runs its tools (the two differ by a few ms on this machine)."""
    times: dict[str, list[float]] = {name: [] for name in (*PATHS, *GETS)}
    with recalld.open(settings=settings) as engine:
        memory_id = engine.list(limit=1)[0].id
        async with (Client(stdio, read_timeout_seconds=120) as over_stdio,
                    Client(url, read_timeout_seconds=120) as over_http):  # fmt: skip
            clients = {"mcp_stdio": over_stdio, "mcp_http": over_http}
            for question, as_of in probes[:3]:  # warm: models and caches load; not counted
                engine.search(question, limit=LIMIT, as_of=as_of)
                for client in clients.values():
                    await client.call_tool("memory_search", {"query": question})
            for _ in range(rounds):
                for question, as_of in probes:
                    search = functools.partial(engine.search, question, limit=LIMIT, as_of=as_of)
                    started = time.perf_counter()
                    search()
                    times["in_process"].append((time.perf_counter() - started) * 1000)
                    started = time.perf_counter()
                    await anyio.to_thread.run_sync(search)
                    times["in_process_worker_thread"].append((time.perf_counter() - started) * 1000)
                    args = {"query": question, "limit": LIMIT, "as_of": as_of.isoformat()}
                    for name, client in clients.items():
                        started = time.perf_counter()
                        result = await client.call_tool("memory_search", args)
                        times[name].append((time.perf_counter() - started) * 1000)
                        assert not result.is_error, result
                    started = time.perf_counter()
                    engine.get(memory_id)
                    times["get_in_process"].append((time.perf_counter() - started) * 1000)
                    for name, client in clients.items():
                        started = time.perf_counter()
                        result = await client.call_tool("memory_get", {"id": memory_id})
                        times[f"get_{name}"].append((time.perf_counter() - started) * 1000)
                        assert not result.is_error, result
    return {name: summary(values) for name, values in times.items()}


async def timed_calls(client: Client, probes: list[Any], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        for question, as_of in probes:
            args = {"query": question, "limit": LIMIT, "as_of": as_of.isoformat()}
            started = time.perf_counter()
            result = await client.call_tool("memory_search", args)
            times.append((time.perf_counter() - started) * 1000)
            assert not result.is_error, result
    return times


def concurrent(url: str, probes: list[Any]) -> dict[str, float]:
    async def one(out: list[float]) -> None:
        async with Client(url, read_timeout_seconds=120) as client:
            out.extend(await timed_calls(client, probes, 1))

    async def main() -> tuple[float, list[float]]:
        times: list[float] = []
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for _ in range(CLIENTS):
                group.start_soon(one, times)
        return time.perf_counter() - started, times

    elapsed, times = anyio.run(main)
    return {
        **summary(times),
        "clients": CLIENTS,
        "searches_per_second": round(len(times) / elapsed, 1),
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def with_http_server(env: dict[str, str], run: Callable[[str], Awaitable[Any] | Any]) -> Any:
    port = free_port()
    command = [shutil.which("recalld") or "recalld", "mcp", "--http", "--port", str(port)]
    server = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):  # bounded: 60 s to start listening
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        return run(f"http://127.0.0.1:{port}/mcp/")
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("longmemeval", type=Path)
    parser.add_argument("--question", type=int, default=0, help="Whose haystack is the store.")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recalld-bench-mcp-"))
    settings, probes = build_store(workdir / "memory.db", args.longmemeval, args.question)
    probes = probes[: args.queries]
    env = {**os.environ, "RECALLD_DB": str(settings.db), "RECALLD_CACHE_DIR": str(workdir / "c")}
    report: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"),
                              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                              "python": sys.version.split()[0], "load_before": load()}  # fmt: skip
    with recalld.open(settings=settings) as engine:
        report["memories"] = engine.status().store.memories
    stdio = StdioServerParameters(
        command=shutil.which("recalld") or "recalld", args=["mcp"],
        env={k: env[k] for k in ("RECALLD_DB", "RECALLD_CACHE_DIR")},
    )  # fmt: skip
    report.update(with_http_server(env, lambda url: anyio.run(
        interleaved, settings, stdio, url, probes, args.rounds)))  # fmt: skip
    report["mcp_http_concurrent"] = with_http_server(env, lambda url: concurrent(url, probes))
    report["load_after"] = load()
    base = report["in_process"]["p50_ms"]
    print("| path | p50 ms | p95 ms | p50 / in process |\n|---|---|---|---|")
    for name in (*PATHS, "mcp_http_concurrent", *GETS):
        row = report[name]
        ratio = row["p50_ms"] / (report["get_in_process"]["p50_ms"] if name in GETS else base)
        print(f"| {name} | {row['p50_ms']} | {row['p95_ms']} | {ratio:.2f}x |")
    print(json.dumps(report, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
