"""The load bench's client (recalld.bench.load_client) against real servers on loopback."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from recalld.bench import load
from recalld.bench.load_client import Connection, LoadClientError

CLIENT_CPU_CEILING_MS = 1.0
"""The most CPU the load bench's clients may spend a search: what they spend is taken from
the server under test on the same cores (httpx's clients spent 5-6 ms a search, the plain
socket about 0.2; docs/design/server-path.md)."""

QUERIES = ["where did the ferry leave from", "what colour was the kite", "who baked bread"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``recalld serve --workers 2`` on a small store (the fake embedder), a few memories."""
    folder = tmp_path_factory.mktemp("load-client")
    env = load.server_env(str(folder / "store.db"), "fake", folder)
    with load.served(env, folder / "serve.log", workers=2) as url:
        for text in ["the ferry left from the north pier", "a red kite", "she baked bread"]:
            assert httpx.post(f"{url}/v1/memories", json={"content": text}).status_code == 201
        yield url


def test_answers_are_read_whole_and_the_connection_is_kept(served: str) -> None:
    with Connection(served, timeout=30) as http:
        for query in QUERIES * 2:
            body = json.dumps({"query": query, "limit": 10}).encode()
            answer = http.send(http.request("POST", "/v1/search", body))
            plain = httpx.post(f"{served}/v1/search", json={"query": query, "limit": 10})
            assert answer.status == plain.status_code == 200
            assert json.loads(answer.body)["hits"] == plain.json()["hits"]
            assert answer.worker.isdigit()
        first = http._socket
        bad = http.send(http.request("POST", "/v1/search", b'{"limit": 10}'))
        assert bad.status == 422 and json.loads(bad.body)
        assert http.send(http.request("GET", "/healthz")).status == 200
        assert http._socket is first  # one connection throughout (keep-alive)


def test_measure_costs_the_clients_little(served: str) -> None:
    """The load bench's row says what its clients cost, and it is a small share of a search."""
    load.warm(served, QUERIES, count=3, workers=2)
    row = load.measure(served, 4, 1.5, QUERIES)
    assert row["errors"] == 0 and row["requests"] > 20
    assert sum(row["per_worker"]) == row["requests"]
    assert 0 < row["client_cpu_ms_per_search"] < CLIENT_CPU_CEILING_MS


def test_measure_mixes_adds_in(served: str) -> None:
    row = load.measure(served, 2, 1.0, QUERIES, new_memory=lambda n, i: f"note {n} {i}")
    assert row["errors"] == 0 and row["adds"] > 0 and row["requests"] > row["adds"]
    found = httpx.post(f"{served}/v1/search", json={"query": "note", "limit": 50}).json()
    assert any(hit["memory"]["content"].startswith("note ") for hit in found["hits"])


@pytest.fixture
def raw_server() -> Iterator[tuple[str, list[list[bytes]]]]:
    """A loopback server playing one canned script a connection: each request read gets the
    script's next answer; an empty answer closes the connection without one, as does the
    script's end. Yields its URL and the list of scripts to append to."""
    listener = socket.create_server(("127.0.0.1", 0))
    scripts: list[list[bytes]] = []

    def serve() -> None:
        while True:
            try:
                peer, _ = listener.accept()
            except OSError:
                return
            with peer:
                for answer in scripts.pop(0) if scripts else []:
                    peer.recv(65536)
                    if not answer:
                        break
                    peer.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", scripts
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        listener.close()
        thread.join(timeout=5)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def test_unreadable_answers_raise_and_the_next_request_reconnects(
    raw_server: tuple[str, list[list[bytes]]],
) -> None:
    url, scripts = raw_server
    scripts += [
        [b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nno length"],
        [b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\ncut short"],
        [b"garbage\r\n\r\n"],
        [b""],  # a new connection closed unanswered: an error, not tried again
        [b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-Recalld-Worker: 7\r\n\r\n{}"],
    ]
    with Connection(url, timeout=5) as http:
        sent = http.request("GET", "/x")
        for expected in ["no Content-Length", "closed the connection", "not an HTTP answer",
                         "before answering"]:  # fmt: skip
            with pytest.raises(LoadClientError, match=expected):
                http.send(sent)
        answer = http.send(sent)  # a new connection after each failure
        assert (answer.status, answer.worker, answer.body) == (201, "7", b"{}")


def test_a_connection_the_server_closed_while_idle_is_not_used(
    raw_server: tuple[str, list[list[bytes]]],
) -> None:
    """``recalld serve`` closes a connection idle past its keep-alive timeout: the next
    request goes on a new one, not an error, whether the close arrived before the request
    (seen) or as it went out (the request was not read: sent again, once)."""
    url, scripts = raw_server
    scripts += [[OK], [OK, b""], [OK, b""], [OK]]
    with Connection(url, timeout=5) as http:
        assert http.send(http.request("GET", "/x")).status == 200
        time.sleep(0.2)  # idle: the server's close arrives
        for _ in range(3):  # the server drops the kept connection on the second request
            assert http.send(http.request("GET", "/x")).status == 200


def test_only_http_urls_with_a_port() -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        Connection("https://127.0.0.1:1", timeout=1)
    with pytest.raises(ValueError, match="http://host:port"):
        Connection(str(Path("/tmp")), timeout=1)
