"""What the reliability run's sections share: the tally of checks, store locations on both
backends, a ``recalld`` subprocess environment and a ``recalld serve`` on loopback."""

from __future__ import annotations

import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import recalld
from recalld.bench import load
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory

SRC = str(Path(recalld.__file__).resolve().parents[1])


@dataclass
class Check:
    """One row of the report: how often a property was tried, and how often it broke."""

    name: str
    backend: str
    gating: bool = True
    """False: reported only (a known defect another change fixes)."""
    attempts: int = 0
    failures: int = 0
    worst: str = ""
    worst_value: float = -1.0
    notes: list[str] = field(default_factory=list)

    def attempt(self, ok: bool, detail: str = "") -> None:
        self.attempts += 1
        if not ok:
            self.failures += 1
            if len(self.notes) < 5:
                self.notes.append(detail[:300])

    def observe(self, value: float, text: str) -> None:
        """Keep the worst (largest) value seen, with how it reads."""
        if value > self.worst_value:
            self.worst_value, self.worst = value, text


@dataclass
class Run:
    """The run's options, its scratch folder, its PostgreSQL server and its checks."""

    folder: Path
    backends: tuple[str, ...]
    admin_dsn: str | None
    quick: bool
    seed: int
    drop_databases: bool = True
    """False when the PostgreSQL server is the run's own (its folder goes at the end)."""
    checks: list[Check] = field(default_factory=list)
    load: list[dict[str, Any]] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    """The capacity searches (:func:`recalld.bench.load.capacity`), one per backend."""
    databases: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def check(self, name: str, backend: str, gating: bool = True) -> Check:
        for found in self.checks:
            if (found.name, found.backend) == (name, backend):
                return found
        made = Check(name, backend, gating)
        self.checks.append(made)
        return made

    def say(self, line: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {line}", file=sys.stderr, flush=True)

    def location(self, backend: str, name: str) -> str:
        """A fresh, empty store: an SQLite file, or a PostgreSQL database (see :meth:`close`)."""
        if backend == "sqlite":
            return str(self.folder / f"{name}-{uuid.uuid4().hex[:8]}.db")
        return self._database()

    def copy_of(self, backend: str, seed: str) -> str:
        """A fresh copy of the store ``seed`` (closed): a file copy, or a template copy."""
        if backend == "sqlite":
            target = self.folder / f"copy-{uuid.uuid4().hex[:8]}.db"
            with sqlite3.connect(seed) as source, sqlite3.connect(target) as copy:
                source.backup(copy)
            return str(target)
        import psycopg

        return self._database(psycopg.conninfo.conninfo_to_dict(seed)["dbname"])

    def _database(self, template: str | None = None) -> str:
        import psycopg

        from recalld.bench.scale_postgres import database_dsn

        assert self.admin_dsn is not None
        name = f"recalld_rel_{uuid.uuid4().hex[:12]}"
        copy = f" TEMPLATE {template}" if template else ""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}{copy}")
        self.databases.append(name)
        return database_dsn(self.admin_dsn, name)

    def close(self) -> None:
        """Drop the run's databases (several at once), unless the server goes with the run."""
        if not self.drop_databases or not self.databases:
            return
        import psycopg

        def drop(name: str) -> None:
            assert self.admin_dsn is not None
            with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(drop, self.databases))


def cli_env(run: Run, **extra: str) -> dict[str, str]:
    """A ``recalld`` subprocess's environment: this checkout, no user config, fake embedder."""
    config = run.folder / "empty.toml"
    config.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    env.update(PYTHONPATH=SRC, RECALLD_CONFIG=str(config), RECALLD_EMBEDDER="fake",
               RECALLD_CACHE_DIR=str(run.folder / "cache"), **extra)  # fmt: skip
    return env


def recalld_command() -> list[str]:
    return [sys.executable, "-c", "from recalld.interfaces.cli import main; main()"]


def engine(location: str, tenant: str = "default", **settings: Any) -> recalld.MemoryEngine:
    values = {"db": location, "cache_dir": None, "tenant": tenant, **settings}
    return recalld.open(settings=Settings(**values), embedder=FakeEmbedder())


WORDS = ["crane", "berth", "harbour", "invoice", "kestrel", "deploy", "backup", "sister",
         "lisbon", "march", "kayak", "database", "staging", "recipe", "cycling", "passport",
         "meeting", "budget", "garden", "piano"]  # fmt: skip


def text(prefix: str, i: int) -> str:
    """A generated memory: varied words, so that searches rank something."""
    picked = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(6)]
    return f"{prefix} note {i}: the {' '.join(picked)} item number {i} at berth {i % 97}"


def memories(prefix: str, count: int, start: int = 0) -> list[NewMemory]:
    return [NewMemory(text(prefix, i), id=f"{prefix}-{i}", session_id=f"{prefix}-s{i // 25}")
            for i in range(start, start + count)]  # fmt: skip


@contextmanager
def serve(run: Run, location: str) -> Iterator[str]:
    """``recalld serve`` on the store, on 127.0.0.1 (cache on); its base URL."""
    env = cli_env(run, RECALLD_DB=location, RECALLD_HTTP_RATE_LIMIT="1000000")
    log = run.folder / f"serve-{len(list(run.folder.glob('serve-*')))}.log"
    with load.served(env, log) as url:
        yield url
