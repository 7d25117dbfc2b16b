"""The HTTP API's limits and words: nesting and size checked before parsing, a maximum query
length, an empty patch refused, type errors that name the field and the type in plain words,
``/docs`` with nothing to fetch, and ``recalld serve --access-log``."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from serve_helpers import free_port, uvicorn_thread, wait_until_serving

from recalld.config import Settings
from recalld.interfaces.http import create_app, json_depth
from recalld.interfaces.http_routes import SEARCH_THREAD_PREFIX
from recalld.interfaces.mcp import mcp_extension
from recalld.providers.embedders import FakeEmbedder, Vectors
from recalld.requests import MAX_QUERY_CHARS

LOCAL = "http://127.0.0.1"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    folder = tmp_path_factory.mktemp("limits")
    settings = Settings(db=folder / "memory.db", cache_dir=None, embedder="fake")
    app = create_app(settings, embedder=FakeEmbedder(), extensions=[mcp_extension])
    with TestClient(app, base_url=LOCAL) as test_client:
        yield test_client


def refused(answer: httpx.Response, status: int) -> str:
    assert answer.status_code == status, answer.text
    return str(answer.json()["error"]["message"])


def deep(levels: int) -> bytes:
    return b'{"query": "x", "filters": {"project": ' + b"[" * levels + b"]" * levels + b"}}"


@pytest.mark.parametrize("path", ["/v1/search", "/v1/memories", "/mcp/"])
def test_a_deeply_nested_body_is_refused_before_parsing(client: TestClient, path: str) -> None:
    started = time.perf_counter()
    headers = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}  # fmt: skip
    answer = client.post(path, content=deep(5_000), headers=headers)
    assert "nests deeper than 64 levels" in refused(answer, 400)
    assert time.perf_counter() - started < 1.0


def test_nesting_is_counted_outside_strings_only() -> None:
    assert json_depth(b'{"a": [1, {"b": "[[[[{{{{"}]}') == 3
    assert json_depth(b'"\\"[["') == 0
    assert json_depth(b"[" * 5_000 + b"]" * 5_000) == 5_000
    many = b'{"memories": [' + b",".join([b'{"content": "x", "tags": ["a"]}'] * 10_000) + b"]}"
    assert json_depth(many) == 4


def test_a_long_query_is_refused_in_milliseconds(client: TestClient) -> None:
    text = "what did I decide " * (100_000 // 18 + 1)
    started = time.perf_counter()
    answer = client.post("/v1/search", json={"query": text[:100_000]})
    elapsed = time.perf_counter() - started
    message = refused(answer, 422)
    assert message == (f"the query has 100,000 characters, over the limit of "
                       f"{MAX_QUERY_CHARS:,}: search with its key words")  # fmt: skip
    assert elapsed < 0.1, f"{elapsed * 1000:.0f} ms"
    assert refused(client.post("/v1/context", json={"query": text[:100_000]}), 422) == message
    assert client.post("/v1/search", json={"query": "x" * MAX_QUERY_CHARS}).status_code == 200


def test_an_empty_patch_is_refused_and_changes_nothing(client: TestClient) -> None:
    made = client.post("/v1/memories", json={"content": "the patch target"}).json()["id"]
    before = client.get(f"/v1/memories/{made}").json()
    assert refused(client.patch(f"/v1/memories/{made}", json={}), 400) == (
        "nothing to change: give at least one field"
    )
    assert client.get(f"/v1/memories/{made}").json() == before


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [("/v1/search", {"query": 42}, "query: expected a string"),
     ("/v1/search", {"query": "x", "limit": "many"}, "limit: expected an integer"),
     ("/v1/search", {"query": "x", "limit": 2.5}, "limit: expected an integer"),
     ("/v1/search", {"query": "x", "explain": "maybe"}, "explain: expected true or false"),
     ("/v1/search", {"query": "x", "filters": []}, "filters: expected an object"),
     ("/v1/search", {"query": "x", "as_of": "soon"},
      "as_of: expected an ISO date or datetime such as 2024-03-14 or 2024-03-14T09:30"),
     ("/v1/search", {"query": "x", "granularity": "all"},
      "granularity: must be 'memory' or 'session'"),
     ("/v1/memories", {"memories": []}, "memories: needs at least one item"),
     ("/v1/memories", {"content": ["a"]}, "content: expected a string"),
     ("/v1/memories", {"content": "x", "metadata": [1]}, "metadata: expected an object"),
     ("/v1/memories/m1/supersede", {"by": ""}, "by: must not be empty")],
)  # fmt: skip
def test_type_errors_name_the_field_and_the_type(
    client: TestClient, path: str, body: dict[str, Any], message: str
) -> None:
    said = refused(client.post(path, json=body), 422)
    assert said == message
    assert not re.search(r"[Ii]nput should|should have|after validation|valid \w+", said)


def test_query_parameters_are_checked_in_the_same_words(client: TestClient) -> None:
    assert (
        refused(client.get("/v1/memories", params={"limit": 0}), 422) == "limit: must be at least 1"
    )
    said = refused(client.get("/v1/memories", params={"limit": "all"}), 422)
    assert said == "limit: expected an integer"


def test_docs_need_nothing_from_the_network(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    html = page.text
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", html), "an outside asset"
    assert "<script" not in html
    for expected in ("/v1/search", "/v1/memories/{memory_id}/supersede", "SearchQuery",
                     "length &lt;= 10000", "integer; &gt;= 1; &lt;= 1000"):  # fmt: skip
        assert expected in html, expected
    assert client.get("/redoc").status_code == 404


def test_serve_access_log(tmp_path: Path, cli_env: dict[str, str],
                          recalld_command: list[str]) -> None:  # fmt: skip
    port = free_port()
    env = {**cli_env, "RECALLD_DB": str(tmp_path / "m.db"), "RECALLD_EMBEDDER": "fake"}
    process = subprocess.Popen([*recalld_command, "serve", "--access-log", "--port", str(port)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    try:
        wait_until_serving(process, port)
        httpx.get(f"http://127.0.0.1:{port}/v1/memories/nope", timeout=10)
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
    assert '"GET /healthz HTTP/1.1" 200' in out, (out, err)
    assert '"GET /v1/memories/nope HTTP/1.1" 404' in out, (out, err)


class SlowQueries(FakeEmbedder):
    """Each query takes 0.2 s, and the most queries embedded at once is counted."""

    def __init__(self) -> None:
        super().__init__()
        self.active = self.most = 0
        self.lock = threading.Lock()

    def embed_query(self, text: str) -> Vectors:
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(0.2)
        with self.lock:
            self.active -= 1
        return super().embed_query(text)


@pytest.mark.parametrize("turns", [1, 3])
def test_a_server_runs_at_most_its_search_turns_at_once(tmp_path: Path, turns: int) -> None:
    """Six searches and contexts sent at once: the server runs ``http_search_concurrency``
    of them at a time, and answers every one."""
    embedder = SlowQueries()
    settings = Settings(db=tmp_path / "memory.db", cache_dir=None, embedder="fake",
                        http_search_concurrency=turns)  # fmt: skip
    app = create_app(settings, embedder=embedder)
    with (
        uvicorn_thread(app, "127.0.0.1", 0) as port,
        httpx.Client(base_url=f"{LOCAL}:{port}", timeout=30) as http,
    ):
        assert http.post("/v1/memories", json={"content": "a memory"}).status_code == 201
        calls = [("/v1/search" if n % 2 else "/v1/context", {"query": f"question {n}"})
                 for n in range(6)]  # fmt: skip
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda call: http.post(*call[:1], json=call[1]), calls))
    assert [a.status_code for a in answers] == [200] * 6
    assert 1 <= embedder.most <= turns  # never more at once than the turns
    assert embedder.most > 1 or turns == 1  # and more than one when there are more turns


IDLE_THREAD_S = 10.0
"""How long anyio's general thread pool keeps an idle thread (its ``MAX_IDLE_TIME``)."""


class ThreadsOfQueries(FakeEmbedder):
    """Notes the thread that embedded each query (a search's first step): the thread
    objects themselves, so that a thread that ended is never mistaken for a new one."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []

    def embed_query(self, text: str) -> Vectors:
        self.threads.append(threading.current_thread())
        time.sleep(0.02)  # the searches overlap
        return super().embed_query(text)


def test_searches_run_on_as_many_kept_threads_as_turns(tmp_path: Path) -> None:
    """Bursts of eight searches and contexts at once, two turns, the last burst after the
    server was idle longer than a general pool keeps its threads: every search runs on
    the same two threads, each keeping its store connection (SQLite's page cache and
    prepared statements) from one search to the next."""
    embedder = ThreadsOfQueries()
    settings = Settings(db=tmp_path / "memory.db", cache_dir=None, embedder="fake",
                        http_search_concurrency=2)  # fmt: skip
    app = create_app(settings, embedder=embedder)
    with (
        uvicorn_thread(app, "127.0.0.1", 0) as port,
        httpx.Client(base_url=f"{LOCAL}:{port}", timeout=30) as http,
    ):
        assert http.post("/v1/memories", json={"content": "a memory"}).status_code == 201
        for burst in range(3):
            if burst == 2:
                time.sleep(IDLE_THREAD_S + 1)
            calls = [("/v1/search" if n % 2 else "/v1/context", {"query": f"q {burst} {n}"})
                     for n in range(8)]  # fmt: skip
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda c: http.post(c[0], json=c[1]), calls))
            assert [a.status_code for a in answers] == [200] * 8
    assert len({id(thread) for thread in embedder.threads}) == 2


def test_the_search_threads_end_with_the_server(tmp_path: Path) -> None:
    """A server that searched and stopped leaves none of its search threads behind (each
    held a store connection); one made again afterwards searches on new ones."""
    settings = Settings(db=tmp_path / "memory.db", cache_dir=None, embedder="fake",
                        http_search_concurrency=2)  # fmt: skip

    def search_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith(SEARCH_THREAD_PREFIX)]

    before = set(search_threads())
    for _ in range(2):  # the second app: the first's threads are not what it runs on
        app = create_app(settings, embedder=FakeEmbedder())
        with (
            uvicorn_thread(app, "127.0.0.1", 0) as port,
            httpx.Client(base_url=f"{LOCAL}:{port}", timeout=30) as http,
        ):
            assert http.post("/v1/memories", json={"content": "a memory"}).status_code == 201
            answer = http.post("/v1/search", json={"query": "memory"})
            assert answer.status_code == 200 and answer.json()["hits"]
            assert set(search_threads()) - before  # it searched on threads of its own
        assert set(search_threads()) <= before
