"""Schemathesis against the OpenAPI, in process through its ASGI loader, with a valid key:
no 500, no undocumented status, every error in the documented shape, and a refused request
changes nothing. Bounded: a few dozen cases per operation (fake embedder)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import recalld
from recalld.config import Settings
from recalld.interfaces.http import create_app
from recalld.keys import create_key
from recalld.providers.embedders import FakeEmbedder

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]  # fmt: skip


class Target:
    def __init__(self, folder: Path) -> None:
        self.settings = Settings(db=folder / "memory.db", cache_dir=None, embedder="fake",
                                 http_rate_limit=0)  # fmt: skip
        with recalld.open(settings=self.settings, embedder=FakeEmbedder()) as engine:
            self.key = create_key(engine.store, "fuzz")[1]
            fuzz = self.settings.model_copy(update={"tenant": "fuzz"})
        with recalld.open(settings=fuzz, embedder=FakeEmbedder()) as engine:
            engine.add("a memory the fuzzer may find, change or forget", id="seed-1")
        self.app = create_app(self.settings, embedder=FakeEmbedder())

    def fingerprint(self) -> Any:
        engine = self.app.state.recalld.engine_for("fuzz")
        memories = engine.list(limit=100_000, include_forgotten=True)
        return sorted((m.id, m.content, m.updated_at, m.forgotten_at) for m in memories)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    built = Target(tmp_path_factory.mktemp("schema"))
    yield built
    built.app.state.recalld.close()


@pytest.fixture(scope="module")
def api_schema(target: Target) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", target.app)


OPERATIONS = [("POST", "/v1/memories"), ("GET", "/v1/memories"),
              ("GET", "/v1/memories/{memory_id}"), ("PATCH", "/v1/memories/{memory_id}"),
              ("DELETE", "/v1/memories/{memory_id}"),
              ("POST", "/v1/memories/{memory_id}/supersede"), ("POST", "/v1/search"),
              ("POST", "/v1/context"), ("GET", "/v1/status"), ("POST", "/v1/import"),
              ("POST", "/v1/index"), ("GET", "/healthz"), ("POST", "/v1/files"),
              ("GET", "/v1/collections"), ("PUT", "/v1/collections/{name}/context"),
              ("DELETE", "/v1/collections/{name}")]  # fmt: skip


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    found = {(o.ok().method.upper(), o.ok().path) for o in api_schema.get_all_operations()}
    assert found == set(OPERATIONS)


CASES = [
    (method, path, mode)
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if (path, mode) != ("/healthz", GenerationMode.NEGATIVE)
]  # no input to break
"""Every operation with valid data and with invalid data (wrong types, missing fields,
out-of-range values, malformed bodies)."""


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=lambda v: str(v))
def test_api_conforms_to_its_schema(
    api_schema: Any, target: Target, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=30, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def check(case: Any) -> None:
        before = target.fingerprint()
        headers = {"Authorization": f"Bearer {target.key}"}
        body = case.body if isinstance(case.body, dict) else {}
        if path == "/v1/index" or (path == "/v1/import" and body.get("path") is not None):
            # a generated server path could name any folder: only the 401 wall is fuzzed
            headers = {}
        response = case.call_and_validate(headers=headers, checks=CHECKS)
        if response.status_code >= 400:
            data = response.json()
            assert set(data) == {"error"} and set(data["error"]) == {"code", "message"}
            assert target.fingerprint() == before, (method, path, response.status_code)

    check()
