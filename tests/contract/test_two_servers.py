"""Two ``recalld serve`` processes on one PostgreSQL database, on loopback: what one writes,
the other answers at once (the way N servers run behind a load balancer, docs/postgres.md)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import recalld
from recalld.keys import create_key

from ..interfaces.serve_helpers import free_port, wait_until_serving

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


@pytest.fixture
def two_servers(
    pg_database: str, tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> Iterator[tuple[list[str], str]]:
    """Two servers on ``pg_database`` and one key of tenant alice that both accept."""
    with recalld.open(pg_database, embedder="fake") as root:
        key = create_key(root.store, "alice")[1]
    env = {**cli_env, "RECALLD_DB": pg_database, "RECALLD_EMBEDDER": "fake",
           "RECALLD_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    processes, urls = [], []
    try:
        for _ in range(2):
            port = free_port()
            processes.append(
                subprocess.Popen(
                    [*recalld_command, "serve", "--port", str(port)],
                    env=env,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for process, url in zip(processes, urls, strict=True):
            wait_until_serving(process, int(url.rsplit(":", 1)[1]))
        yield urls, key
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.communicate(timeout=30)


def test_each_server_answers_what_the_other_wrote_at_once(
    two_servers: tuple[list[str], str],
) -> None:
    (first, second), key = two_servers
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(headers=headers, timeout=60) as http:
        for n in range(5):
            writer, reader = (first, second) if n % 2 == 0 else (second, first)
            content = f"the harbour crane number {n} was repainted blue"
            added = http.post(f"{writer}/v1/memories", json={"content": content})
            assert added.status_code in (200, 201), added.text
            memory_id = added.json()["id"]
            got = http.get(f"{reader}/v1/memories/{memory_id}")
            assert got.status_code == 200 and got.json()["content"] == content
            found = http.post(f"{reader}/v1/search", json={"query": content, "limit": 3})
            assert memory_id in [hit["memory"]["id"] for hit in found.json()["hits"]]
        forgotten = http.delete(f"{first}/v1/memories/{memory_id}")
        assert forgotten.status_code == 200, forgotten.text
        found = http.post(f"{second}/v1/search", json={"query": content, "limit": 10})
        assert memory_id not in [hit["memory"]["id"] for hit in found.json()["hits"]]
