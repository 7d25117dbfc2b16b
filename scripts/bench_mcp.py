"""MCP search latency against a warm server vs the same search in process (docs/mcp.md).

Builds a store from one LongMemEval_S question's haystack with the real packaged model, then
times ``memory_search`` (query embedding included) for the file's questions:

- in process: ``engine.search`` on a warm engine;
- MCP over stdio: ``recalld mcp`` launched as an agent launches it, the SDK's stdio client;
- MCP over streamable HTTP: ``recalld mcp --http`` on a loopback port, the SDK's client;
- and the HTTP server's throughput with 8 concurrent clients.

    .venv/bin/python scripts/bench_mcp.py \
        ../shared/benchmarks/longmemeval/longmemeval_s.json.gz --queries 100 --rounds 2

Prints a Markdown table and the JSON (with the date and the load average before and after).
"""

from __future__ import annotations

import argparse
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


def in_process(settings: Settings, probes: list[Any], rounds: int) -> dict[str, float]:
    with recalld.open(settings=settings) as engine:
        engine.search(probes[0][0], limit=LIMIT, as_of=probes[0][1])
        times = []
        for _ in range(rounds):
            for question, as_of in probes:
                started = time.perf_counter()
                engine.search(question, limit=LIMIT, as_of=as_of)
                times.append((time.perf_counter() - started) * 1000)
    return summary(times)


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


def over(target: Any, probes: list[Any], rounds: int) -> dict[str, float]:
    async def main() -> list[float]:
        async with Client(target, read_timeout_seconds=120) as client:
            await timed_calls(client, probes[:3], 1)  # warm: the model is loaded by now
            return await timed_calls(client, probes, rounds)

    return summary(anyio.run(main))


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
    report["in_process"] = in_process(settings, probes, args.rounds)
    stdio = StdioServerParameters(
        command=shutil.which("recalld") or "recalld", args=["mcp"],
        env={k: env[k] for k in ("RECALLD_DB", "RECALLD_CACHE_DIR")},
    )  # fmt: skip
    report["mcp_stdio"] = over(stdio, probes, args.rounds)
    report["mcp_http"] = with_http_server(env, lambda url: over(url, probes, args.rounds))
    report["mcp_http_concurrent"] = with_http_server(env, lambda url: concurrent(url, probes))
    report["load_after"] = load()
    base = report["in_process"]["p50_ms"]
    print("| path | p50 ms | p95 ms | p50 / in process |\n|---|---|---|---|")
    for name in ("in_process", "mcp_stdio", "mcp_http", "mcp_http_concurrent"):
        row = report[name]
        print(f"| {name} | {row['p50_ms']} | {row['p95_ms']} | {row['p50_ms'] / base:.2f}x |")
    print(json.dumps(report, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
