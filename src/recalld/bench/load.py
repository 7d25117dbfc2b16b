"""Load through ``recalld serve``: searches per second and their latency under N clients.

:func:`served` starts ``recalld serve`` on a store, on a free port of 127.0.0.1, and stops
it after; :func:`measure` runs N client threads against it for a fixed time, each sending
searches (``POST /v1/search``, limit 10) with one request in ``add_every`` an add, and
reports searches/s, the searches' p50/p95/p99, the server's CPU time a search (searches
only), the clients' own (this process's CPU time a search: they run on the same cores;
:mod:`recalld.bench.load_client`) and how many requests each of its workers answered.
Given a ``rate``, the clients send on a schedule instead of as fast as answers come, and
:func:`capacity` finds the highest rate the server holds within a p99 target. Loopback
only, bounded in time: every client stops at the deadline, and one request may take at
most ``REQUEST_TIMEOUT_S``.

Used by ``recalld bench scale`` (the real model, the scale corpus) and by the adversarial
run (``scripts/reliability.py``, the fake embedder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from recalld.bench.load_client import Connection, LoadClientError
from recalld.errors import RecalldError
from recalld.ports import free_port

START_TIMEOUT_S = 180.0
"""How long the server may take to answer ``/healthz`` (it loads the model first)."""
REQUEST_TIMEOUT_S = 60.0
WARM_TRIES_PER_SEARCH = 8
"""Warming sends at most this many times the searches it wants per worker: new connections
land on the workers at random, so some get more than their share before all are warm."""
SERVE = [sys.executable, "-c", "from recalld.interfaces.cli import main; main()", "serve"]


class LoadBenchError(RecalldError):
    """The server under test did not start."""


@contextmanager
def served(env: Mapping[str, str], log: Path, workers: int = 1) -> Iterator[str]:
    """``recalld serve --workers N`` with ``env`` (its ``RECALLD_DB``, embedder ...) on
    127.0.0.1, its output in ``log``; yields the base URL once it answers, stops it after.
    While it runs, :func:`server_cpu_s` reads the CPU time of its processes.

    Raises:
        LoadBenchError: the server exited or did not answer within ``START_TIMEOUT_S``.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as out:
        process = subprocess.Popen(
            [*SERVE, "--port", str(port), "--workers", str(workers)],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        _serving[url] = process.pid
        try:
            if not answers(url, process):
                raise LoadBenchError(
                    f"recalld serve did not start (exit code {process.poll()}): see {log}"
                )
            yield url
        finally:
            _serving.pop(url, None)
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


_serving: dict[str, int] = {}
"""The process id of each server :func:`served` runs, by its URL."""


def server_cpu_s(url: str) -> float | None:
    """CPU seconds used so far by the server :func:`served` runs at ``url`` and its workers
    (user and system, from ``/proc``: Linux only; None elsewhere or when unknown)."""
    pid = _serving.get(url)
    if pid is None or not Path(f"/proc/{pid}/stat").exists():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for one in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone in between
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def answers(url: str, process: subprocess.Popen[Any], seconds: float = START_TIMEOUT_S) -> bool:
    """Whether the server at ``url`` answers ``/healthz`` before its ``process`` exits or
    ``seconds`` pass (polled every 0.1 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            time.sleep(0.1)
    return False


def server_env(db: str, embedder: str, folder: Path, **extra: str) -> dict[str, str]:
    """The environment of a server under load: this one without recalld's settings, then
    the store, the embedder, an empty config file in ``folder`` (not the user's) and no
    rate limit (the clients are the load)."""
    config = folder / "load-server.toml"
    config.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    env.update(
        RECALLD_DB=db,
        RECALLD_EMBEDDER=embedder,
        RECALLD_CONFIG=str(config),
        RECALLD_HTTP_RATE_LIMIT="1000000",
        **extra,
    )
    return env


def measure(
    url: str,
    clients: int,
    seconds: float,
    queries: Sequence[str],
    new_memory: Callable[[int, int], str] | None = None,
    add_every: int = 10,
    limit: int = 10,
    rate: float | None = None,
) -> dict[str, Any]:
    """``clients`` threads for ``seconds`` each (the clock starts once all are connected):
    client ``n``'s ``i``-th request is an add of ``new_memory(n, i)`` when ``(i + n)`` is a
    multiple of ``add_every`` (never without ``new_memory``), else a search of the next
    question. Errors count every request that was not a 2xx (or got no answer).

    Without ``rate`` each client sends its next request when the last is answered. With
    ``rate`` (requests/s, all clients together) each request has its moment on a fixed
    schedule, the clients taking turns; a client that is late sends at once, and a
    request's latency counts from its moment, so the time it waited behind a slow answer
    is counted too (a closed loop would leave it out and flatter a saturated server)."""
    searches: list[float] = []
    adds, errors = [0], [0]
    answered: dict[str, int] = {}  # requests answered by each worker (its pid)
    lock = threading.Lock()
    window = [0.0, 0.0]  # start, deadline: set once every client is connected

    def go() -> None:
        window[0] = time.monotonic()
        window[1] = window[0] + seconds

    ready = threading.Barrier(clients, action=go)

    search_bodies = [json.dumps({"query": query, "limit": limit}).encode() for query in queries]

    def client(n: int) -> None:
        i = 0
        with Connection(url, REQUEST_TIMEOUT_S) as http:
            searches_sent = [http.request("POST", "/v1/search", b) for b in search_bodies]
            http.send(http.request("GET", "/healthz"))  # connected before the clock starts
            ready.wait()
            while time.monotonic() < window[1]:
                i += 1
                add = new_memory is not None and (i + n) % add_every == 0
                if add and new_memory is not None:
                    added = json.dumps({"content": new_memory(n, i)}).encode()
                    sent = http.request("POST", "/v1/memories", added)
                else:
                    sent = searches_sent[(n * 31 + i) % len(queries)]
                started = time.monotonic()
                if rate is not None:
                    started = window[0] + ((i - 1) * clients + n) / rate
                    if started >= window[1]:
                        break
                    time.sleep(max(0.0, started - time.monotonic()))
                try:
                    answer = http.send(sent)
                    ok, worker = answer.status in (200, 201), answer.worker
                except LoadClientError:
                    ok, worker = False, ""
                took = time.monotonic() - started
                with lock:
                    errors[0] += not ok
                    answered[worker] = answered.get(worker, 0) + ok
                    if add:
                        adds[0] += 1
                    else:
                        searches.append(took)

    cpu_before, own_before = server_cpu_s(url), time.process_time()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    elapsed = time.monotonic() - window[0]
    cpu_after, own_after = server_cpu_s(url), time.process_time()
    cpu_ms = client_ms = None
    if cpu_before is not None and cpu_after is not None and searches and not adds[0]:
        cpu_ms = (cpu_after - cpu_before) * 1000 / len(searches)
    if searches and not adds[0]:
        client_ms = (own_after - own_before) * 1000 / len(searches)
    return {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "rate": rate,
        "searches_per_s": len(searches) / elapsed,
        "adds": adds[0],
        "errors": errors[0],
        "requests": len(searches) + adds[0],
        **{f"p{q}_ms": percentile(searches, q) * 1000 for q in (50, 95, 99)},
        "server_cpu_ms_per_search": cpu_ms,
        "client_cpu_ms_per_search": client_ms,
        "per_worker": sorted(answered.values(), reverse=True),
    }


def capacity(
    url: str,
    clients: int,
    seconds: float,
    queries: Sequence[str],
    p99_ms: float,
    ceiling: float,
    steps: int = 4,
    limit: int = 10,
    new_memory: Callable[[int, int], str] | None = None,
) -> dict[str, Any]:
    """The highest rate of requests (per second, ``clients`` sending on a schedule) whose
    searches' p99 stays within ``p99_ms`` with no error: a bisection between 0 and
    ``ceiling`` (the rate of a closed loop, which no schedule can beat) in ``steps`` tries
    of ``seconds`` each, adds mixed in as :func:`measure` mixes them. Returns the best try
    that held (``None`` if none did) and every try.
    """
    low, high = 0.0, ceiling
    tries: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    rate = ceiling * 0.8
    for _ in range(steps):
        row = measure(url, clients, seconds, queries, new_memory, limit=limit, rate=rate)
        held = row["p99_ms"] <= p99_ms and row["errors"] == 0 and row["searches_per_s"] > 0
        tries.append({**row, "held": held})
        if held:
            low = rate
            if best is None or row["searches_per_s"] > best["searches_per_s"]:
                best = row
        else:
            high = rate
        rate = (low + high) / 2
    return {"clients": clients, "p99_target_ms": p99_ms, "best": best, "tries": tries}


def warm(url: str, queries: Sequence[str], count: int = 20, workers: int = 1) -> None:
    """``count`` searches first on each of the server's ``workers`` (each on a new
    connection, so that every worker gets some), so that the figures are a warm server's:
    a worker's first searches load its vectors and measure its model."""
    answered: dict[str, int] = {}
    for i in range(count * workers * WARM_TRIES_PER_SEARCH):
        query = queries[i % len(queries)]
        answer = httpx.post(
            f"{url}/v1/search", json={"query": query, "limit": 10}, timeout=REQUEST_TIMEOUT_S
        )
        worker = answer.headers.get("x-recalld-worker", "")
        answered[worker] = answered.get(worker, 0) + 1
        if len(answered) >= workers and min(answered.values()) >= count:
            return


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]
