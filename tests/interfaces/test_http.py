"""``recalld serve``: every endpoint, keys, tenant isolation, limits, errors (fake embedder).

Most tests call the app in process (starlette's TestClient); one module-scoped uvicorn
server on 127.0.0.1 with an ephemeral port checks the real HTTP path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from fastapi import FastAPI
from fastapi.testclient import TestClient
from serve_helpers import (
    free_port,
    reading_lines,
    uvicorn_thread,
    wait_until_serving,
)

import recalld
from recalld.config import Settings
from recalld.interfaces.cli import cli
from recalld.interfaces.http import RateLimiter, create_app, is_loopback
from recalld.keys import create_key, revoke_key
from recalld.providers.embedders import FakeEmbedder
from recalld.requests import SearchQuery, parse


@dataclass
class Server:
    app: FastAPI
    client: TestClient
    settings: Settings
    alice: str
    bob: str
    admin: str
    revoked: str

    def auth(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def snapshot(self, tenant: str) -> list[dict[str, Any]]:
        """Every memory of a tenant, forgotten ones too, as JSON (to prove nothing changed)."""
        with recalld.open(settings=self.settings.model_copy(update={"tenant": tenant}),
                          embedder=FakeEmbedder()) as engine:  # fmt: skip
            memories = engine.list(limit=10_000, include_forgotten=True)
        return [json.loads(json.dumps(recalld.serialize.to_json(m))) for m in memories]


def make_settings(folder: Path, **extra: Any) -> Settings:
    return Settings(db=folder / "memory.db", cache_dir=None, embedder="fake", **extra)


def make_server(folder: Path, **extra: Any) -> Iterator[Server]:
    settings = make_settings(folder, **extra)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        alice = create_key(engine.store, "alice", shared=["team"])[1]
        bob = create_key(engine.store, "bob")[1]
        admin = create_key(engine.store, "alice", admin=True, label="ops")[1]
        revoked = create_key(engine.store, "alice")[1]
        revoke_key(engine.store, revoked)
    app = create_app(settings, embedder=FakeEmbedder())
    with TestClient(app) as client:
        yield Server(app, client, settings, alice, bob, admin, revoked)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from make_server(tmp_path_factory.mktemp("http"))


def error_of(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    return str(body["error"]["message"])


def add(server: Server, key: str, content: str, **fields: Any) -> str:
    response = server.client.post("/v1/memories", json={"content": content, **fields},
                                  headers=server.auth(key))  # fmt: skip
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


# -- every endpoint ----------------------------------------------------------------------------


def test_every_endpoint_with_a_key(server: Server, tmp_path: Path) -> None:
    c, h = server.client, server.auth(server.alice)
    assert c.get("/healthz").json()["status"] == "ok"
    one = c.post("/v1/memories", headers=h, json={
        "content": "the deploy runs on Fridays", "tags": ["ops"], "project": "atlas",
        "event_time": "2024-03-01T10:00:00"})  # fmt: skip
    assert one.status_code == 201 and one.json()["created"] is True
    memory_id = one.json()["id"]
    batch = c.post("/v1/memories", headers=h, json={"memories": [
        {"content": "Ana arrives on 14 March", "type": "event"},
        {"content": "prefers tea over coffee", "type": "insight", "namespace": "team"},
        {"content": "the deploy runs on Fridays", "tags": ["ops"], "project": "atlas"},
    ]})  # fmt: skip
    results = batch.json()["results"]
    assert batch.status_code == 201 and [r["created"] for r in results] == [True, True, False]
    assert results[2]["duplicate_of"] == memory_id

    listed = c.get("/v1/memories", headers=h, params={"project": "atlas", "tag": "ops"})
    assert [m["id"] for m in listed.json()["memories"]] == [memory_id]
    got = c.get(f"/v1/memories/{memory_id}", headers=h).json()
    assert got["content"] == "the deploy runs on Fridays" and got["namespace"] == "alice"

    found = c.post("/v1/search", headers=h, json={"query": "deploy Fridays", "limit": 3,
                                                  "explain": True})  # fmt: skip
    hits = found.json()["hits"]
    assert found.status_code == 200 and memory_id in [h["memory"]["id"] for h in hits]
    assert hits[0]["trace"]["channels"]
    with recalld.open(
        settings=server.settings.model_copy(update={"tenant": "alice", "shared": ("team",)}),
        embedder=FakeEmbedder(),
    ) as engine:
        same = engine.run_search(parse(SearchQuery, {"query": "deploy Fridays", "limit": 3,
                                                     "explain": True}))  # fmt: skip
    assert [h["memory"]["id"] for h in hits] == [x.memory.id for x in same.hits]
    assert [h["score"] for h in hits] == [x.score for x in same.hits]

    context = c.post("/v1/context", headers=h, json={"query": "deploy", "max_tokens": 40})
    assert context.status_code == 200 and context.json()["tokens"] <= 40
    assert context.json()["text"].startswith("[Memory Context]")

    patched = c.patch(f"/v1/memories/{memory_id}", headers=h, json={"tags": ["ops", "weekly"]})
    assert patched.json()["tags"] == ["ops", "weekly"]
    assert patched.json()["content"] == "the deploy runs on Fridays"

    status = c.get("/v1/status", headers=h).json()
    assert status["store"]["memories"] == 3 and status["embedder"] == "fake"

    lines = '{"content": "imported one"}\nnot json\n'
    report = c.post("/v1/import", headers=h, json={"format": "memories", "content": lines})
    assert report.status_code == 200, report.text
    assert (report.json()["stored"], len(report.json()["problems"])) == (1, 1)
    on_disk = tmp_path / "m.jsonl"
    on_disk.write_text('{"content": "from a server file"}\n', encoding="utf-8")
    refused = c.post("/v1/import", headers=h, json={"path": str(on_disk)})
    assert "admin" in error_of(refused, 403)
    by_admin = c.post("/v1/import", headers=server.auth(server.admin), json={"path": str(on_disk)})
    assert by_admin.json()["stored"] == 1

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "MEMORY.md").write_text("# Notes\n\nThe staging database is called kestrel.\n",
                                     encoding="utf-8")  # fmt: skip
    assert "admin" in error_of(c.post("/v1/index", headers=h, json={"paths": [str(notes)]}), 403)
    indexed = c.post("/v1/index", headers=server.auth(server.admin),
                     json={"paths": [str(notes)]})  # fmt: skip
    assert indexed.status_code == 200, indexed.text
    assert indexed.json()["chunks_added"] >= 1

    gone = c.delete(f"/v1/memories/{memory_id}", headers=h)
    assert gone.json() == {"forgotten": 1, "hard": False}
    assert c.get(f"/v1/memories/{memory_id}", headers=h).json()["forgotten_at"] is not None
    hard = c.delete(f"/v1/memories/{memory_id}", headers=h, params={"hard": "true"})
    assert hard.json() == {"forgotten": 1, "hard": True}
    assert "unknown id" in error_of(c.get(f"/v1/memories/{memory_id}", headers=h), 404)


def test_openapi_documents_every_route_with_examples_and_errors(server: Server) -> None:
    spec = server.client.get("/openapi.json").json()
    one = "/v1/memories/{memory_id}"
    wanted = {("post", "/v1/memories"), ("get", "/v1/memories"), ("get", one),
              ("patch", one), ("delete", one),
              ("post", "/v1/search"), ("post", "/v1/context"), ("get", "/v1/status"),
              ("post", "/v1/import"), ("post", "/v1/index"), ("get", "/healthz")}  # fmt: skip
    have = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    assert wanted <= have
    for path, method in [(p, m) for m, p in wanted]:
        operation = spec["paths"][path][method]
        assert {"400", "401", "404", "413", "422", "429"} <= set(operation["responses"])
        if method in ("post", "patch"):
            assert operation["requestBody"]["content"]["application/json"]["examples"]
    schemas = spec["components"]["schemas"]
    assert {"Memory", "SearchResult", "Context", "Status", "Error", "SearchQuery"} <= set(schemas)


# -- bad input ---------------------------------------------------------------------------------


def test_bad_input_gives_the_library_message_and_changes_nothing(server: Server) -> None:
    c, h = server.client, server.auth(server.alice)
    before = server.snapshot("alice")
    with (recalld.open(settings=server.settings, embedder=FakeEmbedder()) as engine,
          pytest.raises(recalld.InvalidInputError) as library):  # fmt: skip
        engine.search("deploy", mode="fuzzy")
    assert error_of(c.post("/v1/search", headers=h, json={"query": "deploy", "mode": "fuzzy"}),
                    422) == str(library.value)  # fmt: skip
    assert "the query is empty" in error_of(c.post("/v1/search", headers=h,
                                                   json={"query": "  "}), 422)  # fmt: skip
    as_json = {**h, "Content-Type": "application/json"}
    assert "not valid JSON" in error_of(c.post("/v1/search", headers=as_json, content=b"{oops"),
                                        400)  # fmt: skip
    assert "empty" in error_of(c.post("/v1/search", headers=h, content=b""), 400)
    assert "JSON object" in error_of(c.post("/v1/search", headers=h, json=[1, 2]), 422)
    assert "priority must be between" in error_of(
        c.post(
            "/v1/memories",
            headers=h,
            json={"memories": [{"content": "fine"}, {"content": "bad", "priority": 7}]},
        ),
        422,
    )
    assert "unknown field colour" in error_of(
        c.post("/v1/memories", headers=h, json={"content": "x", "colour": "red"}), 422
    )
    assert "content is empty" in error_of(
        c.post("/v1/memories", headers=h, json={"content": "   "}), 422
    )
    assert "not granted" in error_of(
        c.post("/v1/memories", headers=h, json={"content": "x", "namespace": "bob"}), 422
    )
    assert "limit" in error_of(c.get("/v1/memories", headers=h, params={"limit": 0}), 422)
    assert "no such resource" in error_of(c.get("/v1/nothing", headers=h), 404)
    fixed = add(server, server.alice, "a memory with a chosen id", id="chosen-1")
    assert "tags cannot be null" in error_of(
        c.patch(f"/v1/memories/{fixed}", headers=h, json={"tags": None}), 422
    )
    before = server.snapshot("alice")
    assert "already exists" in error_of(
        c.post("/v1/memories", headers=h, json={"content": "other words", "id": fixed}), 409
    )
    assert server.snapshot("alice") == before


# -- keys and tenants --------------------------------------------------------------------------


def _calls(memory_id: str) -> list[tuple[str, str, Any]]:
    return [
        ("get", f"/v1/memories/{memory_id}", None),
        ("patch", f"/v1/memories/{memory_id}", {"content": "overwritten"}),
        ("delete", f"/v1/memories/{memory_id}", None),
        ("post", "/v1/memories", {"content": "written with a bad key"}),
        ("get", "/v1/memories", None),
        ("post", "/v1/search", {"query": "secret plans"}),
        ("post", "/v1/context", {"query": "secret plans"}),
        ("get", "/v1/status", None),
        ("post", "/v1/import", {"content": '{"content": "imported with a bad key"}'}),
        ("post", "/v1/index", {"paths": ["."]}),
    ]


def _call(server: Server, method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
    if body is None:
        return server.client.request(method, path, headers=headers)
    return server.client.request(method, path, headers=headers, json=body)


def test_missing_invalid_and_revoked_keys_are_refused_everywhere(server: Server) -> None:
    memory_id = add(server, server.alice, "alice's secret plans for the launch")
    before = server.snapshot("alice")
    bad = {
        "missing": {},
        "invalid": server.auth("rk_000000000000_not-the-secret"),
        "not a key": server.auth("hunter2"),
        "wrong secret": server.auth(server.alice[:-4] + "AAAA"),
        "revoked": server.auth(server.revoked),
        "not bearer": {"Authorization": f"Basic {server.alice}"},
    }
    for name, headers in bad.items():
        for method, path, body in _calls(memory_id):
            response = _call(server, method, path, body, headers)
            message = error_of(response, 401)
            assert response.headers["www-authenticate"] == "Bearer", (name, path)
            if name == "revoked":
                assert "revoked" in message
    assert server.snapshot("alice") == before


def test_a_tenant_cannot_reach_another_tenants_memories(server: Server) -> None:
    memory_id = add(server, server.alice, "alice's secret plans for the launch")
    shared_id = add(server, server.alice, "the team's secret plans", namespace="team")
    before = server.snapshot("alice")
    bob = server.auth(server.bob)
    for target in (memory_id, shared_id):
        for method, path, body in _calls(target)[:3]:
            assert "unknown id" in error_of(_call(server, method, path, body, bob), 404)
    found = server.client.post("/v1/search", headers=bob, json={"query": "secret plans"})
    assert found.status_code == 200 and found.json()["hits"] == []
    context = server.client.post("/v1/context", headers=bob, json={"query": "secret plans"})
    assert context.json()["hits"] == [] and context.json()["text"] == ""
    listed = server.client.get("/v1/memories", headers=bob, params={"include_forgotten": True})
    assert all(m["namespace"] == "bob" for m in listed.json()["memories"])
    assert server.client.get("/v1/status", headers=bob).json()["store"]["memories"] == len(
        listed.json()["memories"]
    )
    assert server.snapshot("alice") == before
    # alice's key reaches the shared namespace it was granted
    alice = server.auth(server.alice)
    assert server.client.get(f"/v1/memories/{shared_id}", headers=alice).status_code == 200


def test_keys_cli_create_list_revoke(tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"RECALLD_DB": str(tmp_path / "k.db"), "RECALLD_EMBEDDER": "fake",
           "RECALLD_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    made = runner.invoke(cli, ["keys", "create", "--tenant", "carol", "--namespace", "team",
                               "--admin"], env=env)  # fmt: skip
    assert made.exit_code == 0, made.output
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("rk_")
    listed = json.loads(runner.invoke(cli, ["--json", "keys", "list"], env=env).stdout)
    assert [(k["tenant"], k["shared"], k["admin"]) for k in listed] == [("carol", ["team"], True)]
    assert key.split("_", 2)[2] not in json.dumps(listed)  # the secret is never listed
    stored = (tmp_path / "k.db").read_bytes()
    assert key.split("_", 2)[2].encode() not in stored
    gone = runner.invoke(cli, ["keys", "revoke", listed[0]["id"]], env=env)
    assert gone.exit_code == 0 and "revoked" in gone.stdout
    again = runner.invoke(cli, ["keys", "revoke", listed[0]["id"]], env=env)
    assert again.exit_code == 2 and "already revoked" in again.stderr
    assert runner.invoke(cli, ["keys", "revoke", "nope"], env=env).exit_code == 3
    bad = runner.invoke(cli, ["keys", "create", "--tenant", "no spaces allowed"], env=env)
    assert bad.exit_code == 2 and "invalid tenant" in bad.stderr


# -- no keys, limits, rate ---------------------------------------------------------------------


def test_without_keys_only_loopback_is_served(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    app = create_app(settings, embedder=FakeEmbedder())
    with TestClient(app, base_url="http://127.0.0.1") as client:
        created = client.post("/v1/memories", json={"content": "no key needed on loopback"})
        assert created.status_code == 201
        assert client.get("/v1/status").json()["store"]["memories"] == 1
    public = create_app(settings, embedder=FakeEmbedder(), host="0.0.0.0")
    with TestClient(public, base_url="http://127.0.0.1") as client:
        assert "missing API key" in error_of(client.get("/v1/status"), 401)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")


def test_body_batch_and_rate_limits(tmp_path: Path) -> None:
    for server in make_server(tmp_path, http_max_body_bytes=2_000, http_max_batch=3,
                              http_rate_limit=12):  # fmt: skip
        c, h = server.client, server.auth(server.alice)
        before = server.snapshot("alice")
        big = c.post("/v1/memories", headers=h, json={"content": "x" * 3_000})
        assert "larger than 2000 bytes" in error_of(big, 413)
        four = {"memories": [{"content": f"memory {i}"} for i in range(4)]}
        assert "over the limit of 3" in error_of(c.post("/v1/memories", headers=h, json=four),
                                                 422)  # fmt: skip
        assert server.snapshot("alice") == before
        statuses = [c.get("/v1/status", headers=h).status_code for _ in range(12)]
        assert statuses.count(429) >= 1 and statuses[0] == 200
        limited = c.get("/v1/status", headers=h)
        assert "rate limit of 12" in error_of(limited, 429)
        assert int(limited.headers["retry-after"]) >= 1
        # another key has its own bucket
        assert c.get("/v1/status", headers=server.auth(server.bob)).status_code == 200


def test_the_rate_limiter_refills() -> None:
    now = [0.0]
    limiter = RateLimiter(60, clock=lambda: now[0])
    assert [limiter.take("k") for _ in range(60)] == [0.0] * 60
    assert limiter.take("k") == pytest.approx(1.0)
    now[0] += 2.0
    assert limiter.take("k") == 0.0 and limiter.take("other") == 0.0
    assert RateLimiter(0).take("k") == 0.0


# -- a real server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(server: Server) -> Iterator[str]:
    """The same app under uvicorn on 127.0.0.1, an ephemeral port."""
    with uvicorn_thread(server.app, "127.0.0.1", 0, lifespan="off") as port:
        yield f"http://127.0.0.1:{port}"


def test_real_http_round_trip_and_concurrent_searches(server: Server, live: str) -> None:
    h = server.auth(server.alice)
    with httpx.Client(base_url=live, headers=h, timeout=30) as client:
        created = client.post("/v1/memories", json={"content": "the kestrel database is staging"})
        assert created.status_code == 201
        memory_id = created.json()["id"]
        first = client.post("/v1/search", json={"query": "kestrel staging", "limit": 1})
        assert first.json()["hits"][0]["memory"]["id"] == memory_id
        assert client.get("/v1/status", headers={"Authorization": "Bearer nope"}).status_code == 401

        def search(_: int) -> list[str]:
            with httpx.Client(base_url=live, headers=h, timeout=30) as own:
                found = own.post("/v1/search", json={"query": "kestrel staging", "limit": 1})
                assert found.status_code == 200
                return [hit["memory"]["id"] for hit in found.json()["hits"]]

        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(search, range(8))) == [[memory_id]] * 8
        assert client.get("/healthz").json()["version"] == recalld.__version__


def test_recalld_serve_process_says_what_and_where(
    tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    """The real command: without keys a public --host falls back to loopback, and says so."""
    import subprocess

    port = free_port()
    env = {**cli_env, "RECALLD_DB": str(tmp_path / "served.db"), "RECALLD_EMBEDDER": "fake"}
    process = subprocess.Popen([*recalld_command, "serve", "--host", "0.0.0.0", "--port",
                                str(port)], env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    with reading_lines(process.stderr) as lines:
        try:
            wait_until_serving(process, port, said=lines)  # every worker, not the first
            added = httpx.post(f"http://127.0.0.1:{port}/v1/memories", timeout=10,
                               json={"content": "served without a key on loopback"})  # fmt: skip
            assert added.status_code == 201
        finally:
            process.terminate()
            process.wait(timeout=30)
    err = "".join(lines)
    assert "refusing to listen on 0.0.0.0; listening on 127.0.0.1 only" in err
    assert f"HTTP API on http://127.0.0.1:{port}" in err
    assert "store: " in err and "served.db" in err
    assert "no API keys exist" in err
