"""The HTTP API's tenant wall on both backends: each key reaches only its tenant's memories
(on PostgreSQL behind Row-Level Security too)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from recalld.config import Settings
from recalld.interfaces.http import create_app
from recalld.keys import create_key
from recalld.providers.embedders import FakeEmbedder

from .conftest import Opener


def test_two_keys_two_tenants_over_http(open_as: Opener, store_location: str) -> None:
    root = open_as()
    alice, bob = (create_key(root.store, name)[1] for name in ("alice", "bob"))
    settings = Settings(db=store_location, cache_dir=None, embedder="fake")
    app = create_app(settings, embedder=FakeEmbedder())
    with TestClient(app) as client:

        def call(key: str, method: str, path: str, body: Any = None) -> Any:
            headers = {"Authorization": f"Bearer {key}"}
            if body is None:
                return client.request(method, path, headers=headers)
            return client.request(method, path, headers=headers, json=body)

        made = call(alice, "POST", "/v1/memories", {"content": "alice's launch codes", "id": "a1"})
        assert made.status_code == 201
        same_id = call(bob, "POST", "/v1/memories", {"content": "bob's own note", "id": "a1"})
        assert same_id.status_code == 201 and same_id.json()["created"] is True
        assert call(bob, "GET", "/v1/memories/a1").json()["content"] == "bob's own note"
        assert call(alice, "GET", "/v1/memories/a1").json()["content"] == "alice's launch codes"
        found = call(bob, "POST", "/v1/search", {"query": "launch codes"}).json()["hits"]
        assert found and all(h["memory"]["namespace"] == "bob" for h in found)
        listed = call(bob, "GET", "/v1/memories").json()["memories"]
        assert [m["namespace"] for m in listed] == ["bob"]
        assert call(bob, "DELETE", "/v1/memories/a1", None).json()["forgotten"] == 1
        gone = call(alice, "GET", "/v1/memories/a1").json()
        assert gone["forgotten_at"] is None and gone["content"] == "alice's launch codes"
        assert call(alice, "GET", "/v1/status").json()["store"]["memories"] == 1
