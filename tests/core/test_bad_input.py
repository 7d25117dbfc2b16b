"""Bad input gets a clear error and changes nothing: each case compares the store before/after."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_check import file_digest, store_snapshot

import recalld
from recalld.config import Settings
from recalld.errors import (
    EmbedderError,
    EmbedderMismatchError,
    InvalidInputError,
    NotFoundError,
    StoreError,
)
from recalld.providers.embedders import FakeEmbedder, resolve_embedder
from recalld.providers.onnx import OnnxEmbedder
from recalld.records import NewMemory
from recalld.stores.asks import NearestAsk
from recalld.stores.base import CandidateRequest
from recalld.stores.sqlite import SQLiteStore

Opener = Callable[..., recalld.MemoryEngine]
SEEDED = ["The billing deploy broke on Friday.", "Ana arrives on April 12th.", "抹茶のアイスが好き"]


@pytest.fixture
def seeded(open_store: Opener) -> recalld.MemoryEngine:
    engine = open_store(max_content_chars=200)
    results = engine.add_many([NewMemory(c, tags=("seed",)) for c in SEEDED])
    engine.forget(results[2].id)
    return engine


def unchanged(
    engine: recalld.MemoryEngine, action: Callable[[], Any], error: type[Exception]
) -> str:
    """Run ``action``, expect ``error``, and check the store file did not change at all."""
    path = Path(engine.settings.db)
    before = store_snapshot(path)
    with pytest.raises(error) as caught:
        action()
    assert store_snapshot(path) == before
    message = str(caught.value)
    assert message and "Traceback" not in message
    return message


@pytest.mark.parametrize("content", ["", " ", "\n\t  \r\n", "\u3000\u2003", b"", b"   "])
def test_empty_or_whitespace_content_is_refused(seeded: recalld.MemoryEngine, content: Any) -> None:
    message = unchanged(seeded, lambda: seeded.add(content), InvalidInputError)
    assert "empty" in message


def test_content_over_the_size_limit_is_refused(seeded: recalld.MemoryEngine) -> None:
    message = unchanged(seeded, lambda: seeded.add("x" * 201), InvalidInputError)
    assert "201" in message and "200" in message
    # Exactly at the limit is fine; surrounding whitespace does not count.
    assert seeded.add("  " + "y" * 200 + "\n").created


def test_invalid_utf8_bytes_are_refused(seeded: recalld.MemoryEngine) -> None:
    message = unchanged(seeded, lambda: seeded.add(b"caf\xe9 \xff\xfe"), InvalidInputError)
    assert "UTF-8" in message
    assert seeded.get(seeded.add("café".encode()).id).content == "café"


def test_lone_surrogates_and_non_text_are_refused(seeded: recalld.MemoryEngine) -> None:
    unchanged(seeded, lambda: seeded.add("half a pair \ud83d"), InvalidInputError)
    unchanged(seeded, lambda: seeded.add(12345), InvalidInputError)
    unchanged(seeded, lambda: seeded.add(None), InvalidInputError)


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "opinion"},
        {"priority": 2.5},
        {"priority": float("nan")},
        {"priority": "high"},
        {"significance": -0.1},
        {"tags": "deploy"},
        {"tags": ["ok", 3]},
        {"entities": "Lisbon"},
        {"metadata": {"when": datetime(2024, 1, 1)}},
        {"metadata": ["not", "a", "mapping"]},
        {"event_time": "2024-03-01"},
        {"id": "   "},
        {"id": 7},
        {"project": 1},
        {"colour": "blue"},
    ],
    ids=repr,
)
def test_badly_typed_fields_are_refused(
    seeded: recalld.MemoryEngine, fields: dict[str, Any]
) -> None:
    unchanged(seeded, lambda: seeded.add("a perfectly fine memory", **fields), InvalidInputError)


def test_one_bad_item_in_a_batch_writes_nothing(seeded: recalld.MemoryEngine) -> None:
    batch = [NewMemory("first good one"), NewMemory("   "), NewMemory("second good one")]
    unchanged(seeded, lambda: seeded.add_many(batch), InvalidInputError)


def test_reusing_an_id_for_other_content_is_refused(seeded: recalld.MemoryEngine) -> None:
    first = seeded.add("original text", id="fixed-id")
    assert first.created and first.id == "fixed-id"
    unchanged(seeded, lambda: seeded.add("different text", id="fixed-id"), InvalidInputError)
    # The same content under the same id is an idempotent re-add, reported as such.
    again = seeded.add("original text", id="fixed-id")
    assert (again.created, again.duplicate_of) == (False, "fixed-id")


def test_unknown_ids(seeded: recalld.MemoryEngine) -> None:
    known = seeded.list(limit=1)[0].id
    assert "nope" in unchanged(seeded, lambda: seeded.get("nope"), NotFoundError)
    unchanged(seeded, lambda: seeded.update("nope", content="new"), NotFoundError)
    unchanged(seeded, lambda: seeded.forget("nope"), NotFoundError)
    # A mix of known and unknown ids forgets none of them.
    unchanged(seeded, lambda: seeded.forget([known, "nope"], hard=True), NotFoundError)
    unchanged(seeded, lambda: seeded.forget([known, "nope"]), NotFoundError)


def test_bad_updates_change_nothing(seeded: recalld.MemoryEngine) -> None:
    memory_id = seeded.list(limit=1)[0].id
    unchanged(seeded, lambda: seeded.update(memory_id, content="  "), InvalidInputError)
    unchanged(seeded, lambda: seeded.update(memory_id, content=b"\xff"), InvalidInputError)
    unchanged(seeded, lambda: seeded.update(memory_id, created_at=None), InvalidInputError)
    unchanged(seeded, lambda: seeded.update(memory_id, id="other"), InvalidInputError)
    unchanged(seeded, lambda: seeded.update(memory_id, priority=9), InvalidInputError)


@pytest.mark.parametrize(
    "args",
    [
        {"query": ""},
        {"query": "   "},
        {"query": "deploy", "mode": "fuzzy"},
        {"query": "deploy", "limit": 0},
        {"query": "deploy", "limit": 1001},
        {"query": "deploy", "types": ["opinion"]},
        {"query": "deploy", "preset": "fastest"},
    ],
    ids=repr,
)
def test_bad_searches(seeded: recalld.MemoryEngine, args: dict[str, Any]) -> None:
    query = args.pop("query")
    unchanged(seeded, lambda: seeded.search(query, **args), InvalidInputError)


def test_bad_context_budget(seeded: recalld.MemoryEngine) -> None:
    unchanged(seeded, lambda: seeded.context("deploy", max_tokens=0), InvalidInputError)
    unchanged(seeded, lambda: seeded.context("deploy", max_tokens=-5), InvalidInputError)


# -- store files that are not recalld stores ----------------------------------------------


def _open_path(path: Path) -> recalld.MemoryEngine:
    return recalld.open(settings=Settings(db=path, cache_dir=None), embedder=FakeEmbedder())


@pytest.mark.parametrize(
    "garbage",
    [
        b"this is a text file, not a database\n" * 200,
        os.urandom(8192),
        b"SQLite format 3\x00" + b"\x07" * 5000,
    ],
    ids=["text", "random", "bad-header"],
)
def test_corrupt_file_is_refused_and_left_alone(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "memory.db"
    path.write_bytes(garbage)
    with pytest.raises(StoreError) as caught:
        _open_path(path)
    assert str(path) in str(caught.value)
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.db"]


def test_store_damaged_after_creation_gives_store_errors(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with _open_path(path) as engine:
        engine.add_many([f"memory number {i} about the garden" for i in range(300)])
    data = path.read_bytes()
    page = 4096
    # Overwrite every page but the first (the schema) in turn: whatever breaks, it is a
    # StoreError, never a raw sqlite3 exception.
    damaged_runs = 0
    for number in range(1, len(data) // page, 3):
        broken = data[: number * page] + b"\x5a" * page + data[(number + 1) * page :]
        path.write_bytes(broken)
        try:
            with _open_path(path) as engine:
                engine.list(limit=1000)
                engine.search("garden memory 42")
                engine.add(f"new memory {number}")
                engine.reindex()
        except StoreError as exc:
            damaged_runs += 1
            assert str(path) in str(exc)
    assert damaged_runs > 0


def test_foreign_sqlite_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    db.execute("INSERT INTO invoices (total) VALUES (12.5)")
    db.commit()
    db.close()
    before = file_digest(path)
    with pytest.raises(StoreError) as caught:
        _open_path(path)
    assert "another program" in str(caught.value)
    assert file_digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_store_path_that_is_a_folder_or_under_a_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        _open_path(tmp_path)
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    with pytest.raises(StoreError) as caught:
        _open_path(blocker / "memory.db")
    assert "plain-file" in str(caught.value)
    assert blocker.read_text() == "x"


def _without_root_powers() -> list[str]:
    """Prefix that makes a command obey file permissions even when the tests run as root."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file permissions cannot be enforced")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-all", "--"]


@pytest.mark.integration
def test_read_only_store_is_refused_and_unchanged(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "memory.db"
    with _open_path(path) as engine:
        engine.add("written before the store became read-only")
    before = store_snapshot(path)
    digest = file_digest(path)
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        script = (
            "import sys, recalld\n"
            "from recalld.config import Settings\n"
            "from recalld.providers.embedders import FakeEmbedder\n"
            "try:\n"
            f"    e = recalld.open(settings=Settings(db={str(path)!r}, cache_dir=None),"
            " embedder=FakeEmbedder())\n"
            "    e.add('a new memory')\n"
            "except recalld.StoreError as exc:\n"
            "    print(exc); sys.exit(4)\n"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run(
            [*_without_root_powers(), sys.executable, "-c", script],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 4, done.stdout + done.stderr
        assert "writable" in done.stdout or "read-only" in done.stdout
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)
    assert file_digest(path) == digest
    assert store_snapshot(path) == before


# -- embedders that do not fit the store ---------------------------------------------------


def test_embedder_of_another_dimension_is_refused(tmp_path: Path, open_store: Opener) -> None:
    first = open_store(FakeEmbedder(dimension=64))
    first.add("vectors of sixty-four dimensions")
    first.close()
    other = open_store(FakeEmbedder(dimension=32))
    message = unchanged(other, lambda: other.add("another memory"), EmbedderMismatchError)
    assert "64-d" in message and "32-d" in message and "reindex" in message
    unchanged(other, lambda: other.search("sixty-four"), EmbedderMismatchError)
    memory_id = other.list(limit=1)[0].id
    unchanged(other, lambda: other.update(memory_id, content="changed"), EmbedderMismatchError)
    # Reads that need no vectors still work, and status says what is wrong.
    assert other.get(memory_id).content == "vectors of sixty-four dimensions"
    assert other.status().store.with_vectors == 1


def test_embedder_with_same_dimension_but_another_model_is_refused(open_store: Opener) -> None:
    open_store(FakeEmbedder(model_id="model-a")).add("made by model a")
    other = open_store(FakeEmbedder(model_id="model-b"))
    message = unchanged(other, lambda: other.search("model"), EmbedderMismatchError)
    assert "model-a" in message and "model-b" in message


def test_query_vector_of_wrong_dimension_at_the_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    try:
        with _open_path(tmp_path / "memory.db") as engine:
            engine.add("a memory with a 64-d vector")
        before = store_snapshot(tmp_path / "memory.db")
        request = CandidateRequest(asks={"semantic": NearestAsk(5, np.ones(10, dtype=np.float32))})
        with pytest.raises(EmbedderMismatchError) as caught:
            store.candidates(request)
        assert "10" in str(caught.value) and "64" in str(caught.value)
        assert store_snapshot(tmp_path / "memory.db") == before
    finally:
        store.close()


def test_missing_model_file(tmp_path: Path, open_store: Opener) -> None:
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with pytest.raises(EmbedderError) as caught:
        OnnxEmbedder.from_folder(empty)
    assert "model.onnx" in str(caught.value)
    with pytest.raises(EmbedderError):
        resolve_embedder(f"onnx:{empty}")
    engine = open_store()
    engine.add("stored with the fake embedder")
    engine.close()
    failing = recalld.open(
        settings=Settings(db=tmp_path / "memory.db", cache_dir=None, embedder=f"onnx:{empty}")
    )
    try:
        unchanged(failing, lambda: failing.add("needs the missing model"), EmbedderError)
        unchanged(failing, lambda: failing.search("anything"), EmbedderError)
    finally:
        failing.close()


def test_model_file_that_is_not_a_model(tmp_path: Path) -> None:
    folder = tmp_path / "broken-model"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not an onnx graph" * 100)
    tokenizer = Path(recalld.__file__).parent / "data/tokenizers/all-MiniLM-L6-v2/tokenizer.json"
    shutil.copy(tokenizer, folder / "tokenizer.json")
    with pytest.raises(EmbedderError) as caught:
        OnnxEmbedder.from_folder(folder)
    assert "cannot load" in str(caught.value)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(EmbedderError) as caught:
        OnnxEmbedder.from_folder(folder)
    assert "tokenizer" in str(caught.value)


def test_unknown_embedder_spec() -> None:
    for spec in ("word2vec", "onnx:", "openai:", "local:extra"):
        with pytest.raises(InvalidInputError):
            resolve_embedder(spec)
