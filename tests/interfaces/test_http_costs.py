"""What one request may cost: every size that costs CPU or memory is capped, declared in the
OpenAPI document and refused with a 422 (never a 5xx) at every door; keys guessed in a burst
get 429; a request head of 40,000 query parameters gets 431 or 414, not a reset."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from serve_helpers import (
    free_port,
    reading_lines,
    uvicorn_thread,
    wait_until_serving,
)

import recalld
from recalld.config import Settings
from recalld.errors import InvalidInputError
from recalld.interfaces import http
from recalld.interfaces.cli import cli
from recalld.interfaces.http import create_app
from recalld.keys import create_key
from recalld.providers.embedders import FakeEmbedder
from recalld.request_limits import (
    MAX_CONTEXT_TOKENS,
    MAX_EMBED_CHARS,
    MAX_EMBED_CONTEXT_CHARS,
    MAX_ID_CHARS,
    MAX_TAGS,
)
from recalld.requests import AddMemories, SearchQuery, parse


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("costs")
    settings = Settings(db=folder / "memory.db", cache_dir=None, embedder="fake")
    app = create_app(settings, embedder=FakeEmbedder())
    with uvicorn_thread(app, "127.0.0.1", 0) as port:
        yield f"http://127.0.0.1:{port}"


def refused(answer: httpx.Response) -> str:
    assert answer.status_code == 422, (answer.status_code, answer.text[:300])
    return str(answer.json()["error"]["message"])


TOO_MUCH: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/search", {"query": "x", "filters": {"tags": [f"t{i}" for i in range(999)]}},
     "filters.tags: takes at most 64 items"),
    ("/v1/context", {"query": "x", "max_tokens": 10**30}, "max_tokens must be at most"),
    ("/v1/search", {"query": "x", "filters": {"project": "p" * 5000}},
     "filters.project: takes at most 512 characters"),
    ("/v1/memories", {"content": "x", "embed_context": "c" * 300_000},
     "embed_context: takes at most 4000 characters"),
    ("/v1/memories", {"content": "x", "tags": [f"t{i}" for i in range(100_000)]},
     "tags: takes at most 64 items"),
    ("/v1/memories", {"content": "x", "tags": ["t" * 1000]}, "takes at most 200 characters"),
    ("/v1/memories", {"content": "x", "entities": ["e"] * 10_000},
     "entities: takes at most 256 items"),
    ("/v1/memories", {"content": "x", "metadata": {"blob": "m" * 1_000_000}},
     "metadata is 1,000,012 bytes as JSON, over the limit of 65,536"),
    ("/v1/memories", {"content": "x", "session_id": "s" * 100_000},
     "session_id: takes at most 512 characters"),
    ("/v1/memories", {"memories": [{"content": "w " * 49_000}] * 20},
     "hold 1,960,000 characters to embed, over the limit of 1,000,000"),
    ("/v1/import", {"format": "memories", "content": '{"content": "x"}\n' * 70_000},
     "over the limit of 1,000,000"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "said"), TOO_MUCH, ids=[t[2][:30] for t in TOO_MUCH])
def test_each_costly_size_is_refused_over_http(served: str, path: str, body: dict[str, Any],
                                               said: str) -> None:  # fmt: skip
    before = httpx.get(f"{served}/v1/status", timeout=30).json()["store"]["memories"]
    assert said in refused(httpx.post(f"{served}{path}", json=body, timeout=60))
    assert httpx.get(f"{served}/v1/status", timeout=30).json()["store"]["memories"] == before


def test_many_tag_filters_in_the_query_string_are_a_422(served: str) -> None:
    tags = "&".join(f"tag=t{i}" for i in range(999))
    assert "tags: takes at most 64" in refused(httpx.get(f"{served}/v1/memories?{tags}"))


def test_the_largest_accepted_request_is_accepted(served: str) -> None:
    body = {"memories": [{"content": "w " * 48_000, "tags": [f"t{i}" for i in range(MAX_TAGS)],
                          "embed_context": "c " * (MAX_EMBED_CONTEXT_CHARS // 2),
                          "project": "p" * MAX_ID_CHARS}] * 10}  # fmt: skip
    assert sum(len(m["content"]) + 4000 for m in body["memories"]) <= MAX_EMBED_CHARS
    answer = httpx.post(f"{served}/v1/memories", json=body, timeout=120)
    assert answer.status_code == 201, answer.text[:300]
    context = {"query": "w", "max_tokens": MAX_CONTEXT_TOKENS}
    assert httpx.post(f"{served}/v1/context", json=context, timeout=60).status_code == 200


def test_an_answer_over_the_size_limit_is_refused(
    served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    httpx.post(f"{served}/v1/memories", json={"content": "a sizeable answer " * 50}, timeout=30)
    monkeypatch.setattr(http, "MAX_RESPONSE_BYTES", 2000)
    said = refused(httpx.post(f"{served}/v1/search", json={"query": "sizeable", "limit": 50}))
    assert "over the limit of 2,000: ask for fewer hits" in said


def test_the_limits_are_declared_in_the_openapi_document(served: str) -> None:
    schemas = httpx.get(f"{served}/openapi.json").json()["components"]["schemas"]
    memory = schemas["MemoryIn"]["properties"]
    assert memory["tags"]["maxItems"] == MAX_TAGS and memory["tags"]["items"]["maxLength"] == 200
    assert memory["embed_context"]["anyOf"][0]["maxLength"] == MAX_EMBED_CONTEXT_CHARS
    assert memory["metadata"]["x-maxBytes"] == 65536
    assert memory["session_id"]["anyOf"][0]["maxLength"] == MAX_ID_CHARS
    assert memory["entities"]["anyOf"][0]["maxItems"] == 256
    assert schemas["Filters"]["properties"]["tags"]["maxItems"] == MAX_TAGS
    tokens = schemas["ContextQuery"]["properties"]["max_tokens"]["anyOf"][0]
    assert tokens["maximum"] == MAX_CONTEXT_TOKENS


def test_the_library_and_the_cli_refuse_the_same_sizes(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="filters.tags: takes at most 64 items"):
        parse(SearchQuery, {"query": "x", "filters": {"tags": ["t"] * 999}})
    with pytest.raises(InvalidInputError, match="over the limit of 1,000,000"):
        parse(AddMemories, {"memories": [{"content": "w" * 99_000}] * 11})
    db = tmp_path / "m.db"
    settings = Settings(db=db, cache_dir=None, embedder="fake")
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine, pytest.raises(
            InvalidInputError, match="filters.tags: takes at most 64"):  # fmt: skip
        engine.search("x", tags=["t"] * 999)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        for fields, said in (({"tags": [f"t{i}" for i in range(100)]}, "tags: takes at most 64"),
                             ({"metadata": {"m": "m" * 70_000}}, "over the limit of 65,536"),
                             ({"embed_context": "c" * 5000}, "embed_context: takes at most"),
                             ({"project": "p" * 600}, "project: takes at most 512")):  # fmt: skip
            with pytest.raises(InvalidInputError, match=said):
                engine.add("x", **fields)
        assert engine.status().store.memories == 0
    tags = [arg for i in range(999) for arg in ("--tag", f"t{i}")]
    done = CliRunner().invoke(cli, ["--db", str(db), "--embedder", "fake", "search", "x", *tags])
    assert done.exit_code == 2 and "takes at most 64 items" in done.output, done.output


def test_keys_guessed_in_a_burst_get_429(tmp_path: Path) -> None:
    settings = Settings(db=tmp_path / "keys.db", cache_dir=None, embedder="fake")
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        good = create_key(engine.store, "alice")[1]
    app = create_app(settings, embedder=FakeEmbedder())
    with uvicorn_thread(app, "127.0.0.1", 0) as port, httpx.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=30) as client:  # fmt: skip
        codes = [client.get("/v1/status", headers={"Authorization": f"Bearer rk_wrong{i}"}
                            ).status_code for i in range(300)]  # fmt: skip
        assert set(codes) == {401, 429} and codes[-1] == 429, codes
        assert codes.index(429) <= http.FAILED_AUTH_PER_MINUTE + 1
        assert client.get("/v1/status", headers={"Authorization": f"Bearer {good}"}
                          ).status_code == 200  # a real key still works  # fmt: skip


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
        return received


def test_serve_answers_huge_heads_and_keeps_query_strings_out_of_its_log(
    tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    port = free_port()
    env = {**cli_env, "RECALLD_DB": str(tmp_path / "m.db"), "RECALLD_EMBEDDER": "fake"}
    process = subprocess.Popen([*recalld_command, "serve", "--access-log", "--port", str(port)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    # Each pipe read by one reader only: stderr's lines as they come (the banner, then the
    # warning), stdout's too; communicate() would read stderr beside the thread.
    with reading_lines(process.stdout) as out_lines, reading_lines(process.stderr) as lines:
        try:
            wait_until_serving(process, port, said=lines)  # every worker, not the first
            params = "&".join(f"tag=t{i}" for i in range(40_000))
            line = _raw(port, f"GET /v1/memories?{params} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                        .encode())  # fmt: skip
            assert line.startswith(b"HTTP/1.1 414"), line[:200]
            header = "X-Big: " + "h" * 100_000
            head = _raw(port, f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n{header}\r\n\r\n"
                        .encode())  # fmt: skip
            assert head.startswith(b"HTTP/1.1 431"), head[:200]
            httpx.get(f"http://127.0.0.1:{port}/v1/memories?project=secret-project&tag=pin9321")
        finally:
            process.terminate()
            process.wait(timeout=30)
    out, err = "".join(out_lines), "".join(lines)
    assert '"GET /v1/memories?... HTTP/1.1" 200' in out, (out, err)
    assert "pin9321" not in out and "secret-project" not in out
    assert "warning: without API keys every user of this machine can reach" in err, err


def test_mcp_refuses_the_same_sizes(tmp_path: Path) -> None:
    import anyio
    from mcp import Client

    from recalld.interfaces.mcp import Engines, build_server

    pool = Engines(Settings(db=tmp_path / "mcp.db", cache_dir=None, embedder="fake"))
    said: list[str] = []

    async def main() -> None:
        async with Client(build_server(lambda ctx: pool.get())) as client:
            for tool, args in (
                ("memory_search", {"query": "x", "filters": {"tags": ["t"] * 999}}),
                ("memory_context", {"query": "x", "max_tokens": 10**12}),
                ("memory_add", {"content": "x", "tags": [f"t{i}" for i in range(100)]}),
            ):
                result = await client.call_tool(tool, args)
                assert result.is_error
                said.append(result.content[0].text)  # type: ignore[union-attr]

    try:
        anyio.run(main)
    finally:
        pool.close()
    assert "filters.tags: takes at most 64 items" in said[0]
    assert "at most 100,000" in said[1] or "100000" in said[1]
    assert "tags: takes at most 64 items" in said[2]
