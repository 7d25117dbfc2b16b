"""A server without API keys answers local programs only, never a web page: real servers on
loopback (127.0.0.1 and 127.0.0.2), real requests with the headers a browser sends when a
page calls them directly or by DNS rebinding (``Host: attacker.example``)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import free_port, uvicorn_thread

import recalld
from recalld.config import Settings
from recalld.interfaces.http import create_app
from recalld.interfaces.mcp import mcp_extension
from recalld.keys import create_key
from recalld.providers.embedders import FakeEmbedder

pytestmark = pytest.mark.integration

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "probe", "version": "0"}}}  # fmt: skip
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
SECRET = "the vault combination is 31-7-42"


@dataclass
class Live:
    url: str
    port: int
    host: str
    settings: Settings
    notes: Path

    def memories(self) -> int:
        with recalld.open(settings=self.settings, embedder=FakeEmbedder()) as engine:
            return engine.status().store.memories


def serve(folder: Path, host: str) -> Iterator[Live]:
    """``create_app`` (with the MCP tools mounted) under uvicorn on ``host``, on the store
    in ``folder`` (no key unless the test made one)."""
    notes = folder / "notes"
    notes.mkdir()
    (notes / "vault.md").write_text(f"# Vault\n\n{SECRET}\n", encoding="utf-8")
    settings = Settings(db=folder / "memory.db", cache_dir=None, embedder="fake")
    app = create_app(settings, embedder=FakeEmbedder(), host=host, extensions=[mcp_extension])
    with uvicorn_thread(app, host, free_port(host)) as port:
        yield Live(f"http://{host}:{port}", port, host, settings, notes)


@pytest.fixture(scope="module", params=["127.0.0.1", "127.0.0.2"])
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    yield from serve(tmp_path_factory.mktemp("local"), request.param)


def refused(answer: httpx.Response, status: int) -> str:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"code", "message"}
    return str(error["message"])


def test_a_rebinding_host_is_refused_on_every_route(live: Live) -> None:
    rebound = {"Host": f"attacker.example:{live.port}"}
    with httpx.Client(base_url=live.url, timeout=30) as client:
        indexed = client.post("/v1/index", json={"paths": [str(live.notes)]}, headers=rebound)
        assert "not this server's address" in refused(indexed, 421)
        for path in ("/v1/status", "/v1/memories", "/healthz", "/openapi.json", "/docs"):
            refused(client.get(path, headers=rebound), 421)
        search = client.post("/v1/search", json={"query": "vault combination"}, headers=rebound)
        refused(search, 421)
        mcp = client.post("/mcp/", json=INITIALIZE, headers={**rebound, **MCP_ACCEPT})
        refused(mcp, 421)
        # nothing was indexed: the local caller finds no trace of the file
        found = client.post("/v1/search", json={"query": "vault combination"})
        assert found.status_code == 200 and SECRET not in found.text
    assert live.memories() == 0


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "http://evil.example"}, {"Origin": "null"},
     {"Origin": "http://localhost:3000"},  # another local site is another origin
     {"Sec-Fetch-Site": "cross-site"}],
    ids=["evil", "null", "other-port", "fetch-metadata"],
)  # fmt: skip
def test_a_cross_site_page_is_refused(live: Live, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as client:
        added = client.post("/v1/memories", json={"content": "planted"}, headers=headers)
        assert "cross-site request" in refused(added, 403)
        mcp = client.post("/mcp/", json=INITIALIZE, headers={**headers, **MCP_ACCEPT})
        refused(mcp, 403)
    assert live.memories() == 0


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; "
                     "boundary=x", None],
)  # fmt: skip
def test_a_body_a_page_may_send_unasked_is_refused(live: Live, content_type: str | None) -> None:
    """The content types a page may POST without a preflight never reach a route."""
    body = b'{"content": "planted by a form"}'
    headers = {"Content-Type": content_type} if content_type else {}
    with httpx.Client(base_url=live.url, timeout=30) as client:
        sent = client.post("/v1/memories", content=body, headers=headers)
        assert "must be JSON" in refused(sent, 415)
    assert live.memories() == 0


def test_local_programs_and_the_servers_own_pages_are_served(live: Live) -> None:
    same_origin = {"Origin": live.url, "Sec-Fetch-Site": "same-origin"}
    with httpx.Client(base_url=live.url, timeout=30) as client:
        added = client.post("/v1/memories", json={"content": "served locally"},
                            headers=same_origin)  # fmt: skip
        assert added.status_code == 201, added.text
        named = client.get("/v1/status", headers={"Host": f"localhost:{live.port}"})
        assert named.status_code == 200, named.text
        charset = client.post(
            "/v1/search",
            content=b'{"query": "served"}',
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        assert charset.status_code == 200, charset.text
        mcp = client.post("/mcp/", json=INITIALIZE, headers=MCP_ACCEPT)
        assert mcp.status_code == 200, mcp.text
        forgotten = client.delete(f"/v1/memories/{added.json()['id']}", headers=same_origin)
        assert forgotten.status_code == 200


def test_with_a_key_other_names_are_served(tmp_path: Path) -> None:
    """Once keys exist the key is the wall (a page cannot send it), so a reverse proxy's
    Host is fine; a request without a key is still refused."""
    settings = Settings(db=tmp_path / "memory.db", cache_dir=None, embedder="fake")
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        key = create_key(engine.store, "alice")[1]
    for live in serve(tmp_path, "127.0.0.1"):
        proxied = {"Host": "memory.example.org"}
        with httpx.Client(base_url=live.url, timeout=30) as client:
            ok = client.get("/v1/status", headers={**proxied, "Authorization": f"Bearer {key}"})
            assert ok.status_code == 200, ok.text
            assert "missing API key" in refused(client.get("/v1/status", headers=proxied), 401)


def test_recalld_mcp_http_on_another_loopback_address_keeps_the_guards(
    tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    """The MCP SDK guards only 127.0.0.1, localhost and ::1 by itself; the body limits hold
    for the MCP server alone too."""
    host, port = "127.0.0.2", free_port("127.0.0.2")
    env = {**cli_env, "RECALLD_DB": str(tmp_path / "m.db"), "RECALLD_EMBEDDER": "fake"}
    process = subprocess.Popen([*recalld_command, "mcp", "--http", "--create", "--host", host,
                                "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    url = f"http://{host}:{port}/mcp/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[1]
            with socket.socket() as probe:
                if probe.connect_ex((host, port)) == 0:
                    break
            assert time.monotonic() < deadline, "recalld mcp --http did not listen"
            time.sleep(0.1)
        post: Any = lambda **h: httpx.post(url, json=INITIALIZE, timeout=30,  # noqa: E731
                                           headers={**MCP_ACCEPT, **h})  # fmt: skip
        refused(post(Host=f"attacker.example:{port}"), 421)
        refused(post(Origin="http://evil.example"), 403)
        assert post().status_code == 200
        assert post(Origin=f"http://{host}:{port}").status_code == 200
        deep = httpx.post(url, content=b"[" * 5_000 + b"]" * 5_000, timeout=30,
                          headers={**MCP_ACCEPT, "Content-Type": "application/json"})  # fmt: skip
        assert "nests deeper" in refused(deep, 400)
    finally:
        process.terminate()
        process.communicate(timeout=30)
