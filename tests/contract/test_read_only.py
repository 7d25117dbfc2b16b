"""A store this process cannot write (a read-only mount, a read-only file) is still read:
search, list and status answer, no migration runs, and a write is refused with a clear
error that leaves the file as it was.

How the tests make a store read-only: for a non-root user, ``chmod`` does it. Root ignores
file modes, so as root the tests use what stops root too: a read-only bind mount of the
store's folder (``mount --bind`` then ``remount,ro``: SQLite meets ``EROFS``, exactly a
read-only mount) and the immutable attribute on the store file (``chattr +i``: ``EPERM``
on any write). Where neither is allowed (no CAP_SYS_ADMIN / CAP_LINUX_IMMUTABLE, a file
system without attributes) those tests are skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.errors import StoreError
from recalld.providers.embedders import FakeEmbedder

ROOT = os.geteuid() == 0


def run(*command: str | Path) -> bool:
    return subprocess.run([str(c) for c in command], capture_output=True).returncode == 0


@contextlib.contextmanager
def read_only_folder(folder: Path) -> Iterator[Path]:
    """The folder, seen read-only: a read-only bind mount as root, else its modes."""
    if not ROOT:
        modes = [(p, p.stat().st_mode) for p in [folder, *folder.iterdir()]]
        for path, _ in modes:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield folder
        finally:
            for path, mode in modes:
                path.chmod(mode)
        return
    view = folder.with_name(folder.name + "-ro")
    view.mkdir()
    if not run("mount", "--bind", folder, view):
        pytest.skip("a bind mount is not allowed here")
    try:
        if not run("mount", "-o", "remount,bind,ro", view):
            pytest.skip("a read-only remount is not allowed here")
        yield view
    finally:
        run("umount", view)


@contextlib.contextmanager
def read_only_file(path: Path) -> Iterator[Path]:
    """The file made read-only in its writable folder: immutable as root, else its mode."""
    if not ROOT:
        path.chmod(0o444)
        try:
            yield path
        finally:
            path.chmod(0o600)
        return
    if not run("chattr", "+i", path):
        pytest.skip("the immutable attribute is not available here")
    try:
        yield path
    finally:
        run("chattr", "-i", path)


def settings(db: Path, tmp_path: Path) -> Settings:
    return Settings(db=db, cache_dir=tmp_path / "cache")


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    db = tmp_path / "data" / "memory.db"
    with recalld.open(settings=settings(db, tmp_path), embedder=FakeEmbedder()) as engine:
        engine.add_many(["the kayak club meets on Tuesdays", "my sister lives in Lisbon"])
    return db


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_readable_not_writable(db: Path, tmp_path: Path) -> None:
    before = digest(db)
    with recalld.open(settings=settings(db, tmp_path), embedder=FakeEmbedder()) as engine:
        assert [h.memory.content for h in engine.search("kayak").hits][0].startswith("the kayak")
        assert len(engine.list()) == 2
        assert engine.status().store.memories == 2
        with pytest.raises(StoreError, match="read-only") as refused:
            engine.add("a new memory")
        assert "searched and listed" in str(refused.value)
        with pytest.raises(StoreError, match="read-only"):
            engine.forget([engine.list()[0].id])
    assert digest(db) == before
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


def test_a_store_on_a_read_only_mount_is_searched_and_listed(
    store_file: Path, tmp_path: Path
) -> None:
    with read_only_folder(store_file.parent) as view:
        check_readable_not_writable(view / store_file.name, tmp_path)


def test_a_read_only_store_file_is_searched_and_listed(store_file: Path, tmp_path: Path) -> None:
    with read_only_file(store_file):
        check_readable_not_writable(store_file, tmp_path)


def test_a_read_only_store_whose_last_changes_are_in_its_wal_is_refused_clearly(
    tmp_path: Path,
) -> None:
    """A copy taken while the store was open (its -wal holds the last changes, no -shm): on a
    read-only mount SQLite can read the file alone, which would show the store without them;
    it is refused instead, saying why."""
    db = tmp_path / "live" / "memory.db"
    copy = tmp_path / "copy"
    copy.mkdir()
    with recalld.open(settings=settings(db, tmp_path), embedder=FakeEmbedder()) as engine:
        engine.add_many(["the kayak club meets on Tuesdays", "my sister lives in Lisbon"])
        for name in (db, Path(f"{db}-wal")):
            copy.joinpath(name.name).write_bytes(name.read_bytes())
    assert Path(f"{copy}/memory.db-wal").stat().st_size > 0
    with read_only_folder(copy) as view, pytest.raises(StoreError, match="memory.db-wal"):
        recalld.open(settings=settings(view / "memory.db", tmp_path), embedder=FakeEmbedder())


def test_a_read_only_store_that_needs_a_schema_step_is_refused_clearly(
    store_file: Path, tmp_path: Path
) -> None:
    """A store of an older recalld needs its schema steps, which write: read-only, it is
    refused naming them, not opened to fail on its first read."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(store_file)) as db, db:
        db.execute("DELETE FROM migrations WHERE id = (SELECT max(id) FROM migrations)")
    with read_only_file(store_file), pytest.raises(StoreError, match="needs upgrading first"):
        recalld.open(settings=settings(store_file, tmp_path), embedder=FakeEmbedder())


def test_a_store_another_user_may_write_is_not_read_unsafely(
    store_file: Path, tmp_path: Path
) -> None:
    """Another user's store in their writable folder: without its -shm, SQLite could read it
    only by trusting that nothing writes it meanwhile, which its owner may; refused, saying
    so. (Run without root's power over file modes: ``setpriv`` drops it.)"""
    import shutil
    import sys

    setpriv = shutil.which("setpriv")
    if ROOT and setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot be enforced")
    if not ROOT:
        pytest.skip("needs a second user to own the store")
    os.chown(store_file.parent, 65534, 65534)
    os.chown(store_file, 65534, 65534)
    store_file.parent.chmod(0o755)
    store_file.chmod(0o644)
    script = (
        "import sys, recalld\n"
        "from recalld.config import Settings\n"
        "from recalld.providers.embedders import FakeEmbedder\n"
        "try:\n"
        f"    recalld.open(settings=Settings(db={str(store_file)!r}, cache_dir=None),"
        " embedder=FakeEmbedder())\n"
        "except recalld.StoreError as exc:\n"
        "    print(exc); sys.exit(4)\n"
    )
    assert setpriv is not None
    done = subprocess.run(
        [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--inh-caps",
         "-all", "--", sys.executable, "-c", script],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr
    assert "another user may write it" in done.stdout
