"""The OpenAI-compatible embedder against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_check import store_snapshot

import recalld
from recalld.config import Settings
from recalld.errors import EmbedderError
from recalld.providers.embedders import FakeEmbedder, resolve_embedder
from recalld.providers.openai import OpenAIEmbedder

DIMENSION = 24
_REFERENCE = FakeEmbedder(DIMENSION)


@dataclass
class Endpoint:
    """What the server answers and what it saw."""

    url: str = ""
    status: int = 200
    body: bytes | None = None
    """A fixed body to send instead of real embeddings."""
    dimension: int = DIMENSION
    requests: list[dict[str, Any]] = field(default_factory=list)


def _embeddings(texts: list[str], dimension: int) -> dict[str, Any]:
    vectors = FakeEmbedder(dimension).embed_documents(texts).vectors * 3.0  # not normalised
    items = [
        {"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)
    ]
    # Real servers may answer out of order; the index is what counts.
    return {"object": "list", "data": items[::-1], "model": "test"}


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    state = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
            length = int(self.headers.get("Content-Length", 0))
            payload = json.loads(self.rfile.read(length) or b"{}")
            state.requests.append(
                {"path": self.path, "headers": dict(self.headers), "json": payload}
            )
            if state.body is not None:
                body = state.body
            else:
                body = json.dumps(_embeddings(payload["input"], state.dimension)).encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def embedder(endpoint: Endpoint) -> Iterator[OpenAIEmbedder]:
    client = OpenAIEmbedder("test-model", endpoint.url, api_key="sk-test-123")
    yield client
    client.close()


def test_embeds_in_order_normalised_with_auth(endpoint: Endpoint, embedder: OpenAIEmbedder) -> None:
    texts = ["the deploy broke", "my sister visits in April", "cameras and lenses"]
    batch = embedder.embed_documents(texts)
    expected = _REFERENCE.embed_documents(texts).vectors
    np.testing.assert_allclose(batch.vectors, expected, atol=1e-6)
    assert np.allclose(np.linalg.norm(batch.vectors, axis=1), 1.0)
    assert batch.windows == (1, 1, 1)
    assert embedder.fingerprint.dimension == DIMENSION
    assert embedder.fingerprint.model_id == "openai:test-model"
    for request in endpoint.requests:
        assert request["path"] == "/v1/embeddings"
        assert request["headers"]["Authorization"] == "Bearer sk-test-123"
        assert request["json"]["model"] == "test-model"
    # sent shortest first (by the character estimate), returned in the caller's order
    sent = endpoint.requests[-1]["json"]["input"]
    assert sent == sorted(texts, key=len)
    query = embedder.embed_query("the deploy broke")
    np.testing.assert_allclose(query, expected[0], atol=1e-6)


def test_batches_and_dimensions_option(endpoint: Endpoint) -> None:
    client = OpenAIEmbedder("m", endpoint.url, dimensions=DIMENSION)
    try:
        client.embed_documents([f"text {i}" for i in range(150)])
    finally:
        client.close()
    sizes = [len(r["json"]["input"]) for r in endpoint.requests]
    assert sizes[1:] == [64, 64, 22]  # after the one-text dimension probe
    assert all(r["json"]["dimensions"] == DIMENSION for r in endpoint.requests)
    assert all("Authorization" not in r["headers"] for r in endpoint.requests)


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
def test_error_status_is_an_embedder_error(
    endpoint: Endpoint, embedder: OpenAIEmbedder, status: int
) -> None:
    endpoint.status = status
    endpoint.body = b'{"error": {"message": "quota exceeded"}}'
    with pytest.raises(EmbedderError) as caught:
        embedder.embed_documents(["anything"])
    assert str(status) in str(caught.value) and "quota exceeded" in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [
        b"<html>gateway</html>",
        b"[]",
        b"{}",
        b'{"data": {"index": 0}}',
        b'{"data": [{"index": 0}]}',
        b'{"data": [{"index": 0, "embedding": "zero"}]}',
        b'{"data": [{"index": 0, "embedding": []}]}',
        b'{"data": [{"index": 0, "embedding": [1.0, NaN]}]}',
        b'{"data": [{"index": 5, "embedding": [1.0, 2.0]}]}',
        b'{"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0]}]}',
        b'{"data": [{"index": 0, "embedding": [[1.0, 2.0]]}]}',
    ],
)
def test_malformed_body_is_an_embedder_error(
    endpoint: Endpoint, embedder: OpenAIEmbedder, body: bytes
) -> None:
    endpoint.body = body
    with pytest.raises(EmbedderError):
        embedder.embed_documents(["one text"])


def test_unreachable_endpoint_is_an_embedder_error() -> None:
    client = OpenAIEmbedder("m", "http://127.0.0.1:9/v1", timeout=2)  # port 9: discard, closed
    try:
        with pytest.raises(EmbedderError) as caught:
            client.embed_documents(["x"])
        assert "unreachable" in str(caught.value)
    finally:
        client.close()


def test_dimension_change_midway_is_an_embedder_error(
    endpoint: Endpoint, embedder: OpenAIEmbedder
) -> None:
    embedder.embed_documents(["first"])
    endpoint.dimension = DIMENSION + 1
    with pytest.raises(EmbedderError) as caught:
        embedder.embed_documents(["second"])
    assert "dimension" in str(caught.value)


def test_engine_with_the_openai_embedder(endpoint: Endpoint, tmp_path: Path) -> None:
    settings = Settings(
        db=tmp_path / "m.db",
        cache_dir=None,
        embedder="openai:test-model",
        openai_base_url=endpoint.url,
        openai_api_key="sk-engine",
    )
    client = resolve_embedder(settings.embedder, settings)
    assert isinstance(client, OpenAIEmbedder)
    client.close()
    with recalld.open(settings=settings) as engine:
        stored = engine.add("the billing deploy broke on friday").id
        engine.add("tea with milk and honey")
        assert engine.search("billing deploy", mode="vector").hits[0].memory.id == stored
        before = store_snapshot(tmp_path / "m.db")
        endpoint.status, endpoint.body = 500, b"down"
        with pytest.raises(EmbedderError):
            engine.add("this one cannot be embedded")
        assert store_snapshot(tmp_path / "m.db") == before
    assert {r["headers"]["Authorization"] for r in endpoint.requests} == {"Bearer sk-engine"}


@pytest.mark.integration
def test_cli_uses_the_openai_embedder_from_settings(
    endpoint: Endpoint, tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    env = {
        **cli_env,
        "RECALLD_DB": str(tmp_path / "cli.db"),
        "RECALLD_OPENAI_BASE_URL": endpoint.url,
        "RECALLD_OPENAI_API_KEY": "sk-from-env",
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [*recalld_command, "--embedder", "openai:tiny", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    added = run("--json", "add", "the staging server runs on port 8443")
    assert added.returncode == 0, added.stderr
    memory_id = json.loads(added.stdout)["id"]
    found = run("--json", "search", "staging server port", "--mode", "vector")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["hits"][0]["memory"]["id"] == memory_id
    assert endpoint.requests and all(
        r["headers"]["Authorization"] == "Bearer sk-from-env" and r["json"]["model"] == "tiny"
        for r in endpoint.requests
    )
    endpoint.status, endpoint.body = 502, b"bad gateway"
    failed = run("add", "another memory")
    assert failed.returncode == 6
    assert failed.stderr.startswith("error: embedding endpoint answered 502")


def test_prefixes_are_sent_and_part_of_the_fingerprint(endpoint: Endpoint) -> None:
    settings = Settings(openai_base_url=endpoint.url, embed_query_prefix="query: ",
                        embed_document_prefix="passage: ")  # fmt: skip
    client = resolve_embedder("openai:e5", settings)
    plain = OpenAIEmbedder("e5", endpoint.url)
    try:
        client.embed_documents(["the deploy broke"])
        assert endpoint.requests[-1]["json"]["input"] == ["passage: the deploy broke"]
        query = client.embed_query("the deploy broke")
        assert endpoint.requests[-1]["json"]["input"] == ["query: the deploy broke"]
        expected = _REFERENCE.embed_documents(["query: the deploy broke"]).vectors[0]
        np.testing.assert_allclose(query, expected, atol=1e-6)
        fingerprint = client.fingerprint
        assert (fingerprint.query_prefix, fingerprint.document_prefix) == ("query: ", "passage: ")
        assert fingerprint.key != plain.fingerprint.key
        assert "'query: ' / 'passage: '" in fingerprint.describe()
    finally:
        client.close()  # type: ignore[attr-defined]
        plain.close()
