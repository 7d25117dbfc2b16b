from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import Embedder, FakeEmbedder


class _NoNetwork(socket.socket):
    def connect(self, address):  # type: ignore[no-untyped-def]
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and not (
            host.startswith("127.") or host in ("localhost", "::1") or host.startswith("/")
        ):
            raise RuntimeError(f"tests may only reach loopback, not {host}")
        return super().connect(address)


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only loopback addresses may be reached from the tests."""
    monkeypatch.setattr(socket, "socket", _NoNetwork)


@pytest.fixture(scope="session")
def local_embedder() -> Embedder:
    """The real packaged model, loaded once for the whole run."""
    from recalld.providers.embedders import resolve_embedder

    return resolve_embedder("local")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db=tmp_path / "memory.db", cache_dir=tmp_path / "cache")


@pytest.fixture
def engine(settings: Settings, local_embedder: Embedder) -> Iterator[recalld.MemoryEngine]:
    with recalld.open(settings=settings, embedder=local_embedder) as memory:
        yield memory


@pytest.fixture
def fake_engine(settings: Settings) -> Iterator[recalld.MemoryEngine]:
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as memory:
        yield memory


def at(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(tzinfo=UTC)
