"""The embedding cache under a server's threads: many threads and two tenants adding at once
through one engine, and through the real ``recalld serve`` on loopback, with the cache on."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from recalld.keys import create_key

from ..interfaces.serve_helpers import free_port, wait_until_serving
from .conftest import Opener

THREADS, PER_THREAD = 16, 12
BOUND_S = 90.0
"""Generous for 2 loaded cores; the defect this guards against hung past 300 s."""


def test_sixteen_threads_add_through_one_engine_with_the_cache_on(
    open_as: Opener, tmp_path: Path
) -> None:
    engine = open_as("alice", cache_dir=tmp_path / "cache")
    errors: list[BaseException] = []

    def add(n: int) -> None:
        try:
            for i in range(PER_THREAD):
                # Every other text repeats another thread's, so cache hits and misses mix.
                text = f"thread {n % 8} note {i} about the harbour crane"
                # dedupe off: two threads storing the same text at once is not this test's
                # question, the cache's hits and misses racing is.
                engine.add_many([f"{text} (from {n})", text], dedupe=False)
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    started = time.monotonic()
    threads = [threading.Thread(target=add, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=BOUND_S)
    assert not any(t.is_alive() for t in threads), "threads still adding after the bound"
    assert errors == []
    assert time.monotonic() - started < BOUND_S
    assert engine.status().store.memories == 2 * THREADS * PER_THREAD
    assert engine.status().store.with_vectors == engine.status().store.memories


@pytest.fixture
def served(
    open_as: Opener, store_location: str, tmp_path: Path, cli_env: dict[str, str],
    recalld_command: list[str],
) -> Iterator[tuple[str, dict[str, str]]]:  # fmt: skip
    """``recalld serve`` on the test's store with the cache on; a key for alice and bob."""
    root = open_as()
    keys = {name: create_key(root.store, name)[1] for name in ("alice", "bob")}
    port = free_port()
    env = {**cli_env, "RECALLD_DB": store_location, "RECALLD_EMBEDDER": "fake",
           "RECALLD_CACHE_DIR": str(tmp_path / "served-cache")}  # fmt: skip
    process = subprocess.Popen([*recalld_command, "serve", "--port", str(port)], env=env,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until_serving(process, port)
        yield f"http://127.0.0.1:{port}", keys
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.mark.integration
def test_sixteen_clients_of_two_tenants_add_through_the_server_with_the_cache_on(
    served: tuple[str, dict[str, str]],
) -> None:
    url, keys = served

    def client(n: int) -> list[int]:
        tenant = ("alice", "bob")[n % 2]
        headers = {"Authorization": f"Bearer {keys[tenant]}"}
        codes = []
        with httpx.Client(base_url=url, headers=headers, timeout=BOUND_S) as http:
            for i in range(PER_THREAD):
                # Clients 2k (alice) and 2k+1 (bob) send the same text: cache hits across
                # tenants, and no race of one tenant's duplicates (dedupe is not this test's).
                text = f"pair {n // 2} item {i} about the harbour crane"
                for content in (text, f"{text} from {n}"):
                    codes.append(http.post("/v1/memories", json={"content": content}).status_code)
        return codes

    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        codes = [code for answer in pool.map(client, range(THREADS)) for code in answer]
    elapsed = time.monotonic() - started
    assert [c for c in codes if c not in (200, 201)] == []
    assert elapsed < BOUND_S
    for tenant in ("alice", "bob"):
        headers = {"Authorization": f"Bearer {keys[tenant]}"}
        store = httpx.get(f"{url}/v1/status", headers=headers, timeout=30).json()["store"]
        assert store["memories"] == THREADS // 2 * PER_THREAD * 2
        assert store["with_vectors"] == store["memories"]
