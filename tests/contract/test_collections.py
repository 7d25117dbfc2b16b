"""Named collections on each backend (real SQLite files, real PostgreSQL): a folder indexed
under a name with context lines, its hits labelled, its files read back by path or glob,
each tenant confined to its own collections."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

import recalld
from recalld.errors import InvalidInputError, NotFoundError
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.sqlite.migrations import MIGRATIONS, applied, migrate

from .conftest import Opener
from .folders import AUTH, INSTALL, THEMES, docs_folder


@pytest.fixture
def alice(open_as: Opener, tmp_path: Path) -> recalld.MemoryEngine:
    engine = open_as("alice")
    folder = docs_folder(tmp_path / "alice")
    engine.index([folder], globs=["**/*.md"], name="docs", context="Work documentation")
    engine.set_context("docs", "API reference", path="api/")
    return engine


def test_hits_carry_their_collection_and_every_line_that_applies(
    alice: recalld.MemoryEngine,
) -> None:
    hits = alice.search("when do tokens expire", limit=3).hits
    by_path = {h.collection.path: h.collection for h in hits if h.collection}
    assert by_path["api/auth.md"].name == "docs"
    assert by_path["api/auth.md"].context == ("Work documentation", "API reference")
    assert by_path["guide/install.md"].context == ("Work documentation",)
    # A memory that is no file's carries none.
    alice.add("Tokens of the office coffee machine expire on Friday.")
    direct = [h for h in alice.search("tokens expire", limit=10).hits if h.memory.type != "chunk"]
    assert direct and all(h.collection is None for h in direct)


def test_the_context_block_names_each_collections_lines_once(
    alice: recalld.MemoryEngine,
) -> None:
    block = alice.context("how do I install and pick a theme", max_tokens=400)
    lines = block.text.splitlines()
    assert lines[:2] == ["[Memory Context]", "[Collections]"]
    assert lines.count("- docs: Work documentation") == 1
    assert "[Memories]" in lines
    assert any(line.startswith("- [docs/guide/install.md] ") for line in lines)
    assert block.tokens <= block.budget
    # A budget that leaves no room for the collection's lines and a hit keeps to it.
    small = alice.context("how do I install", max_tokens=12)
    assert small.tokens <= 12


def test_get_by_name_path_relative_path_absolute_path_and_glob(
    alice: recalld.MemoryEngine, tmp_path: Path
) -> None:
    (one,) = alice.get_files("docs/api/auth.md").files
    assert (one.path, one.text, one.truncated) == ("docs/api/auth.md", AUTH, False)
    assert one.collection is not None
    assert one.collection.context == ("Work documentation", "API reference")
    assert alice.get_files("api/auth.md").files[0].text == AUTH
    absolute = str(tmp_path / "alice" / "docs" / "guide" / "install.md")
    assert alice.get_files(absolute).files[0].path == "docs/guide/install.md"
    found = alice.get_files("docs/guide/*.md")
    assert [f.path for f in found.files] == ["docs/guide/install.md", "docs/guide/themes.md"]
    assert [f.text for f in found.files] == [INSTALL, THEMES]
    assert len(alice.get_files("**/*.md").files) == 3


def test_a_glob_matching_nothing_is_an_empty_answer_and_a_path_outside_an_error(
    alice: recalld.MemoryEngine, tmp_path: Path
) -> None:
    empty = alice.get_files("notes/**/*.md")
    assert empty.files == () and "no indexed file matches" in empty.notes[0]
    with pytest.raises(NotFoundError, match="not in any indexed folder"):
        alice.get_files(str(tmp_path / "elsewhere" / "a.md"))
    with pytest.raises(NotFoundError, match="has no indexed file"):
        alice.get_files("docs/api/missing.md")
    with pytest.raises(NotFoundError, match="not an indexed file of any collection"):
        alice.get_files("missing.md")
    with pytest.raises(InvalidInputError):
        alice.get_files("docs/../../etc/passwd")


def test_a_cut_text_says_so(alice: recalld.MemoryEngine) -> None:
    found = alice.get_files("docs/**/*.md", max_bytes=60)
    assert sum(len(f.text.encode()) for f in found.files) <= 60
    assert found.files[0].truncated and "cut at" in (found.files[0].note or "")
    assert any("max_bytes=60" in n for n in found.notes)


def test_a_tenant_never_sees_another_tenants_collections_or_files(
    alice: recalld.MemoryEngine, open_as: Opener, tmp_path: Path
) -> None:
    bob = open_as("bob")
    assert bob.collections() == []
    assert bob.get_files("docs/**/*.md").files == ()
    with pytest.raises(NotFoundError):
        bob.get_files("docs/api/auth.md")
    with pytest.raises(NotFoundError):
        bob.get_files(str(tmp_path / "alice" / "docs" / "api" / "auth.md"))
    with pytest.raises(NotFoundError):
        bob.set_context("docs", "mine now")
    with pytest.raises(NotFoundError):
        bob.remove_collection("docs")
    # Bob may use the same name for a folder of his own.
    bob.index([docs_folder(tmp_path / "bob")], globs=["**/*.md"], name="docs")
    assert bob.collections()[0].contexts == {}
    assert alice.collections()[0].contexts == {"": "Work documentation", "api": "API reference"}
    assert alice.collections()[0].path == str(tmp_path / "alice" / "docs")


def test_names_are_checked_before_anything_is_written(
    alice: recalld.MemoryEngine, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.md").write_text("# A\n\nsomething else\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="already the folder"):
        alice.index([other], globs=["*.md"], name="docs")
    with pytest.raises(InvalidInputError, match="collection name"):
        alice.index([other], globs=["*.md"], name="my notes")
    with pytest.raises(InvalidInputError, match="one line"):
        alice.index([other], globs=["*.md"], name="other", context="two\nlines")
    with pytest.raises(InvalidInputError, match="needs a collection name"):
        alice.index([other], globs=["*.md"], context="a line")
    assert [c.name for c in alice.collections()] == ["docs"]
    assert not any(f.source_path.startswith(str(other)) for f in alice.get_files("**").files)


def test_reindex_by_name_keeps_the_name_and_lines_and_remove_forgets_all(
    alice: recalld.MemoryEngine, tmp_path: Path
) -> None:
    folder = tmp_path / "alice" / "docs"
    (folder / "guide" / "themes.md").write_text(THEMES + "\nDark is the default.\n", "utf-8")
    report = alice.index(name="docs")
    assert report.indexed == (str(folder / "guide" / "themes.md"),)
    assert "Dark is the default." in alice.get_files("docs/guide/themes.md").files[0].text
    (listed,) = alice.collections()
    assert (listed.name, listed.files, listed.contexts[""]) == ("docs", 3, "Work documentation")
    assert alice.set_context("docs", None, path="api").contexts == {"": "Work documentation"}
    deleted = alice.remove_collection("docs")
    assert deleted == listed.chunks > 0
    assert alice.collections() == []
    assert alice.search("tokens expire", limit=5).hits == ()
    assert alice.get_files("**/*.md").files == ()


def test_m013_from_the_previous_version_keeps_roots_and_files(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    try:
        applied(db)
        for number, name, step in [m for m in MIGRATIONS if m[0] < 13]:
            step(db)
            db.execute("INSERT INTO migrations VALUES (?, ?, ?)", (number, name, time.time()))
        db.execute("INSERT INTO source_roots VALUES ('alice', '/w', '[\"*.md\"]', 0, NULL)")
        assert migrate(db)[0] == "m013_collections"
        rows = db.execute("SELECT namespace, path, name FROM source_roots").fetchall()
        assert rows == [("alice", "/w", None)]
        db.execute("UPDATE source_roots SET name = 'w'")
        db.execute("INSERT INTO source_roots VALUES ('alice', '/v', '[]', 0, NULL, 'v')")
        with pytest.raises(sqlite3.IntegrityError):  # a name is unique per namespace
            db.execute("INSERT INTO source_roots VALUES ('alice', '/u', '[]', 0, NULL, 'w')")
        db.execute("INSERT INTO source_roots VALUES ('bob', '/u', '[]', 0, NULL, 'w')")
    finally:
        db.close()


@pytest.mark.postgres
def test_m010_from_the_previous_postgres_version_keeps_roots(pg_database: str) -> None:
    import psycopg

    from recalld.stores.base import Tenancy
    from recalld.stores.postgres import PostgresStore
    from recalld.stores.postgres.schema import migrate

    with psycopg.connect(pg_database, autocommit=True) as conn:
        migrate(conn, upto=9)
        conn.execute("INSERT INTO source_roots VALUES ('alice', '/w', '[\"*.md\"]', 0, NULL)")
    store = PostgresStore(pg_database, Tenancy("alice"))  # applies m010
    try:
        (root,) = store.source_roots()
        assert (root.path, root.name) == ("/w", None)
        store.save_source_root(root.__class__("/w", ("*.md",), name="w"))
        store.save_source_context("/w", "", "Work notes")
        assert store.source_roots()[0].name == "w"
        assert [c.text for c in store.source_contexts()] == ["Work notes"]
    finally:
        store.close()
    bob = PostgresStore(pg_database, Tenancy("bob"))
    try:  # behind the tenant wall
        assert bob.source_roots() == [] and bob.source_contexts() == []
    finally:
        bob.close()


def test_migrate_store_copies_collections_lines_and_texts(
    alice: recalld.MemoryEngine, store_location: str, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.db"
    recalld.migrate_store(store_location, copy, tenant="alice")
    settings = recalld.Settings(db=copy, cache_dir=None, tenant="alice")
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as there:
        assert there.collections() == alice.collections()
        assert there.get_files("docs/api/auth.md").files[0].text == AUTH


def test_a_file_indexed_before_texts_were_kept_is_read_again_while_unchanged(
    tmp_path: Path,
) -> None:
    settings = recalld.Settings(db=tmp_path / "m.db", cache_dir=None)
    folder = docs_folder(tmp_path)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        engine.index([folder], globs=["**/*.md"], name="docs")
    with sqlite3.connect(tmp_path / "m.db") as db:  # as the version before m013 left it
        db.execute("DELETE FROM source_texts")
    (folder / "guide" / "themes.md").write_text("changed since it was indexed\n", "utf-8")
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        found = {f.path: f for f in engine.get_files("docs/**/*.md").files}
        assert found["docs/api/auth.md"].text == AUTH  # unchanged on disk: read and kept
        assert found["docs/guide/themes.md"].text == ""
        assert "index --force" in (found["docs/guide/themes.md"].note or "")
    with sqlite3.connect(tmp_path / "m.db") as db:
        kept = {r[0] for r in db.execute("SELECT path FROM source_texts")}
    assert kept == {str(folder / "api" / "auth.md"), str(folder / "guide" / "install.md")}
