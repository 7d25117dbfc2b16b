"""Two ``recalld serve`` workers on a store past the sizes where the ANN index and the word
index answer: what one worker writes, the other's indexes follow before its next search.

The thresholds (50,000 rows) are lowered to 100 in the server's processes by a launcher
that sets them before the CLI runs; everything else (the fork, the indexes, their catch-up
from the store) is the code as shipped."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import subprocess_env
from tests.interfaces.serve_helpers import free_port, wait_until_serving

import recalld
from recalld.interfaces.workers import BALANCED, WORKER_HEADER
from recalld.providers.embedders import Embedder

pytest.importorskip("onnxruntime")  # usearch needs it loaded first (vector_index)
pytest.importorskip("usearch")
pytest.importorskip("tantivy")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not BALANCED, reason="connections reach every worker where balanced"),
]

SMALL = 100
"""The index thresholds in the server's processes (rows)."""
FILLER = 240
LAUNCH = f"""
from recalld.stores.sqlite import vectors, word_index
word_index.WORD_INDEX_MIN_ROWS = {SMALL}
vectors.VectorMirror.__init__.__defaults__ = ({SMALL}, 50, 1)  # ann_min_rows, subset, threads
from recalld.interfaces.cli import main
main()
"""
TRIES = 60


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, local_embedder: Embedder
) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("indexed")
    db = folder / "served.db"
    settings = recalld.Settings(db=db, cache_dir=None, embedder="local")
    with recalld.open(settings=settings, embedder=local_embedder) as engine:
        engine.add_many(
            f"Inventory note {n}: crate {n} holds spare bolts for shelf {n % 17}."
            for n in range(FILLER)
        )
    port = free_port()
    env = {**subprocess_env(folder), "RECALLD_DB": str(db), "RECALLD_EMBEDDER": "local"}
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, "serve", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(process, port, 120)
        yield f"http://127.0.0.1:{port}", db
    finally:
        process.terminate()
        _, err = process.communicate(timeout=60)
        assert "Traceback" not in err, err


def send(url: str, method: str, path: str, **options: object) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=60) as http:
        return http.request(method, path, **options)  # type: ignore[arg-type]


def elsewhere(url: str, than: str, query: str) -> list[str]:
    """The hits of a search answered by the worker other than ``than``."""
    for _ in range(TRIES):
        answer = send(url, "POST", "/v1/search", json={"query": query, "limit": 5})
        if answer.headers[WORKER_HEADER] != than:
            assert answer.status_code == 200, answer.text
            return [hit["memory"]["id"] for hit in answer.json()["hits"]]
    raise AssertionError("the other worker never answered")


def test_the_indexes_of_each_worker_follow_the_others_writes(server: tuple[str, Path]) -> None:
    url, db = server
    # Both workers search once before any write: each opens its own indexes.
    seen = set()
    for _ in range(TRIES):
        answer = send(url, "POST", "/v1/search", json={"query": "spare bolts shelf 3"})
        assert answer.status_code == 200, answer.text
        seen.add(answer.headers[WORKER_HEADER])
        if len(seen) == 2:
            break
    assert len(seen) == 2
    pairs = [
        ("The kestrel hovered over the motorway verge before diving for a vole.",
         "what bird did we see hunting by the road?"),
        ("Grandmother taught me to knit socks on four double-pointed needles.",
         "who showed me how to make woollen stockings?"),
        ("Our ferry to the island leaves from pier three at 7:15 on weekdays.",
         "when does the boat depart in the morning?"),
    ]  # fmt: skip
    for n, (content, question) in enumerate(pairs):
        added = send(url, "POST", "/v1/memories", json={"content": f"{content} Tag zqvx{n}."})
        assert added.status_code in (200, 201), added.text
        writer, memory_id = added.headers[WORKER_HEADER], added.json()["id"]
        assert elsewhere(url, writer, question)[0] == memory_id  # the vector side
        assert elsewhere(url, writer, f"zqvx{n}")[0] == memory_id  # the word side
    # The ANN index and the word index exist, and the word index covers every logged write.
    assert list(Path(f"{db}.ann").glob("*.usearch"))
    covered = json.loads((Path(f"{db}.words") / "covered.json").read_text(encoding="utf-8"))
    with contextlib.closing(sqlite3.connect(db)) as store:
        (newest,) = store.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'word_changes'"
        ).fetchone()
    assert covered["seq"] == newest > 0
    # Forgotten on one worker: gone from the other's answers, by meaning and by word.
    gone = send(url, "DELETE", f"/v1/memories/{memory_id}")
    assert gone.status_code == 200, gone.text
    writer = gone.headers[WORKER_HEADER]
    assert memory_id not in elsewhere(url, writer, pairs[-1][1])
    assert memory_id not in elsewhere(url, writer, f"zqvx{len(pairs) - 1}")
