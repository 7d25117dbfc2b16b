"""Numbered, named schema migrations, recorded in the ``migrations`` table.

Each runs in its own transaction and is idempotent (``IF NOT EXISTS``), so a run that
died half-way is simply run again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from recalld.stores.sqlite import word_counts
from recalld.text import states_event

APP_ID = "recalld"


def run_script(db: sqlite3.Connection, script: str) -> None:
    """Execute statements one by one: ``executescript`` would commit the open transaction."""
    pending = ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        pending += line
        if sqlite3.complete_statement(pending):
            db.execute(pending)
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement in migration: {pending[:80]}")


def m001_initial(db: sqlite3.Connection) -> None:
    """Memories, their tags and entities, vectors, and the two full-text indexes."""
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS memories (
            pk INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            content TEXT NOT NULL,
            type TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            event_time REAL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            last_accessed_at REAL,
            ref_time REAL NOT NULL,
            access_count INTEGER NOT NULL DEFAULT 0,
            priority REAL NOT NULL DEFAULT 1.0,
            pinned INTEGER NOT NULL DEFAULT 0,
            evergreen INTEGER NOT NULL DEFAULT 0,
            significance REAL NOT NULL DEFAULT 0.5,
            project TEXT,
            scope TEXT NOT NULL DEFAULT 'user',
            session_id TEXT,
            source_kind TEXT NOT NULL DEFAULT 'direct',
            source_path TEXT,
            source_start INTEGER,
            source_end INTEGER,
            source_ref TEXT,
            tags TEXT NOT NULL DEFAULT '[]',
            entities TEXT NOT NULL DEFAULT '[]',
            metadata TEXT NOT NULL DEFAULT '{}',
            valid_until REAL,
            superseded_by TEXT,
            embedding_fingerprint TEXT,
            forgotten_at REAL
        );
        CREATE INDEX IF NOT EXISTS memories_hash ON memories(content_hash);
        CREATE INDEX IF NOT EXISTS memories_ref_time ON memories(ref_time);
        CREATE INDEX IF NOT EXISTS memories_accessed ON memories(last_accessed_at);
        CREATE INDEX IF NOT EXISTS memories_session ON memories(session_id);
        CREATE INDEX IF NOT EXISTS memories_project ON memories(project);
        CREATE INDEX IF NOT EXISTS memories_scope ON memories(scope);
        CREATE INDEX IF NOT EXISTS memories_source ON memories(source_path);
        CREATE TABLE IF NOT EXISTS memory_tags (
            tag TEXT NOT NULL, pk INTEGER NOT NULL, PRIMARY KEY (tag, pk)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS memory_entities (
            entity TEXT NOT NULL, pk INTEGER NOT NULL, PRIMARY KEY (entity, pk)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS memory_entities_pk ON memory_entities(pk);
        CREATE INDEX IF NOT EXISTS memory_tags_pk ON memory_tags(pk);
        -- seq grows on every write, so a reader can load only what is new since it last looked.
        CREATE TABLE IF NOT EXISTS vectors (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            pk INTEGER NOT NULL UNIQUE,
            vector BLOB NOT NULL
        );
        INSERT OR IGNORE INTO meta VALUES ('vector_generation', '0');
        CREATE TRIGGER IF NOT EXISTS vectors_ad AFTER DELETE ON vectors BEGIN
            UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'vector_generation';
        END;
        CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
            content, content='memories', content_rowid='pk',
            tokenize='porter unicode61 remove_diacritics 2'
        );
        CREATE VIRTUAL TABLE IF NOT EXISTS memories_trigram USING fts5(
            content, content='memories', content_rowid='pk', tokenize='trigram'
        );
        CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
            INSERT INTO memories_fts(rowid, content) VALUES (new.pk, new.content);
            INSERT INTO memories_trigram(rowid, content) VALUES (new.pk, new.content);
        END;
        CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, content)
                VALUES ('delete', old.pk, old.content);
            INSERT INTO memories_trigram(memories_trigram, rowid, content)
                VALUES ('delete', old.pk, old.content);
            DELETE FROM memory_tags WHERE pk = old.pk;
            DELETE FROM memory_entities WHERE pk = old.pk;
            DELETE FROM vectors WHERE pk = old.pk;
        END;
        CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE OF content ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, content)
                VALUES ('delete', old.pk, old.content);
            INSERT INTO memories_trigram(memories_trigram, rowid, content)
                VALUES ('delete', old.pk, old.content);
            INSERT INTO memories_fts(rowid, content) VALUES (new.pk, new.content);
            INSERT INTO memories_trigram(rowid, content) VALUES (new.pk, new.content);
        END;
        """,
    )


def m002_sources(db: sqlite3.Connection) -> None:
    """Indexed workspaces (roots) and the state of each indexed file.

    A file's chunks are memories with ``source_kind = 'file'`` and its path in
    ``source_path``; the index on ``(source_kind, source_path)`` makes replacing them cheap.
    """
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS source_roots (
            path TEXT PRIMARY KEY,
            globs TEXT NOT NULL,
            added_at REAL NOT NULL,
            indexed_at REAL
        );
        CREATE TABLE IF NOT EXISTS source_files (
            path TEXT PRIMARY KEY,
            root TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'indexed', 'error')),
            content_hash TEXT,
            chunker TEXT,
            error TEXT,
            indexed_at REAL
        );
        CREATE INDEX IF NOT EXISTS source_files_root ON source_files(root);
        CREATE INDEX IF NOT EXISTS memories_source_file ON memories(source_kind, source_path);
        """,
    )


def _add_column(db: sqlite3.Connection, name: str, declaration: str) -> None:
    """Add a column to ``memories``; a no-op when it is already there, so a step can run twice."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(memories)")}
    if name not in columns:
        db.execute(f"ALTER TABLE memories ADD COLUMN {name} {declaration}")


def m003_embed_context(db: sqlite3.Connection) -> None:
    """Text embedded with a memory's content but not searched as words."""
    _add_column(db, "embed_context", "TEXT")


def m004_forgotten_index(db: sqlite3.Connection) -> None:
    """A partial index of forgotten memories, which vector search masks on every query.

    Without it that lookup scans the whole table (3.5 ms at 10k memories, linear in size).
    """
    run_script(
        db,
        """
        CREATE INDEX IF NOT EXISTS memories_forgotten ON memories(forgotten_at)
            WHERE forgotten_at IS NOT NULL;
        """,
    )


def _compute_tells_event(db: sqlite3.Connection, where: str = "") -> None:
    """Set ``tells_event`` from :func:`recalld.text.states_event` for the rows ``where``
    selects (every row when empty)."""
    db.create_function(
        "recalld_states_event", 1, lambda text: int(states_event(text)), deterministic=True
    )
    db.execute(f"UPDATE memories SET tells_event = recalld_states_event(content) {where}")


def m005_tells_event(db: sqlite3.Connection) -> None:
    """Whether each memory tells of an event (:func:`recalld.text.states_event`), kept with
    it so a search reads a flag instead of running a pattern over a hundred contents."""
    _add_column(db, "tells_event", "INTEGER NOT NULL DEFAULT 0")
    _compute_tells_event(db)


def m006_no_idea_is_no_event(db: sqlite3.Connection) -> None:
    """The event flag computed again for memories that say "no idea": "I had no idea ..."
    stopped counting as an event, and only such memories can change."""
    _compute_tells_event(db, "WHERE content LIKE '%no idea%'")


def _rebuild_memories_with_namespace(db: sqlite3.Connection) -> None:
    """Copy ``memories`` into a table whose ids are unique per namespace, keeping every pk
    (the full-text indexes, tags, entities and vectors refer to rows by pk).

    The new table's definition is the old one's, read from the schema, with the namespace
    added: columns that other migrations added survive, and so do its indexes and triggers.
    """
    found = db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'memories'"
    ).fetchone()
    old_sql: str = found[0]
    if "UNIQUE (namespace, id)" in old_sql:
        return
    body = old_sql[old_sql.index("(") + 1 : old_sql.rindex(")")]
    body = body.replace("id TEXT NOT NULL UNIQUE", "id TEXT NOT NULL", 1)
    # The event flag is given by the writer now (None: not known, computed when read).
    body = body.replace("tells_event INTEGER NOT NULL DEFAULT 0", "tells_event INTEGER", 1)
    columns = [row[1] for row in db.execute("PRAGMA table_info(memories)")]
    extras = [
        row[0]
        for row in db.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'memories'"
            " AND type IN ('index', 'trigger') AND sql IS NOT NULL"
        )
    ]
    db.execute(
        f"CREATE TABLE memories_new ({body}, namespace TEXT NOT NULL DEFAULT 'default',"
        " UNIQUE (namespace, id))"
    )
    names = ", ".join(columns)
    db.execute(f"INSERT INTO memories_new ({names}) SELECT {names} FROM memories")
    db.execute("DROP TABLE memories")  # no trigger fires: the FTS rows keep their pks
    db.execute("ALTER TABLE memories_new RENAME TO memories")
    for statement in extras:
        db.execute(statement)


def _rebuild_sources_with_namespace(db: sqlite3.Connection) -> None:
    """Key indexed roots and files by (namespace, path): two tenants may index one path."""
    have = {row[1] for row in db.execute("PRAGMA table_info(source_files)")}
    if "namespace" in have:
        return
    run_script(
        db,
        """
        ALTER TABLE source_roots RENAME TO source_roots_old;
        ALTER TABLE source_files RENAME TO source_files_old;
        DROP INDEX IF EXISTS source_files_root;
        CREATE TABLE source_roots (
            namespace TEXT NOT NULL DEFAULT 'default',
            path TEXT NOT NULL,
            globs TEXT NOT NULL,
            added_at REAL NOT NULL,
            indexed_at REAL,
            PRIMARY KEY (namespace, path)
        );
        CREATE TABLE source_files (
            namespace TEXT NOT NULL DEFAULT 'default',
            path TEXT NOT NULL,
            root TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'indexed', 'error')),
            content_hash TEXT,
            chunker TEXT,
            error TEXT,
            indexed_at REAL,
            PRIMARY KEY (namespace, path)
        );
        CREATE INDEX source_files_root ON source_files(namespace, root);
        INSERT INTO source_roots (path, globs, added_at, indexed_at)
            SELECT path, globs, added_at, indexed_at FROM source_roots_old;
        INSERT INTO source_files
            (path, root, size, mtime_ns, status, content_hash, chunker, error, indexed_at)
            SELECT path, root, size, mtime_ns, status, content_hash, chunker, error, indexed_at
            FROM source_files_old;
        DROP TABLE source_roots_old;
        DROP TABLE source_files_old;
        """,
    )


def m007_tenants(db: sqlite3.Connection) -> None:
    """Every memory, indexed root and file belongs to a namespace (a tenant's own, or a
    shared one); existing rows go to the default tenant's. Ids are unique per namespace,
    so a guessed or re-used id never collides with another tenant's memory.

    The indexes that serve one tenant's search lead with the namespace.
    """
    _rebuild_memories_with_namespace(db)
    _rebuild_sources_with_namespace(db)
    run_script(
        db,
        """
        CREATE INDEX IF NOT EXISTS memories_ns_ref_time ON memories(namespace, ref_time);
        CREATE INDEX IF NOT EXISTS memories_ns_session ON memories(namespace, session_id);
        CREATE INDEX IF NOT EXISTS memories_ns_hash ON memories(namespace, content_hash);
        CREATE INDEX IF NOT EXISTS memories_ns_source
            ON memories(namespace, source_kind, source_path);
        """,
    )


def m008_session_position(db: sqlite3.Connection) -> None:
    """Each memory's place in its session as data (``position``, from 0), filled from the
    storage order that neighbouring turns used to mean; a session is per namespace."""
    _add_column(db, "position", "INTEGER")
    run_script(
        db,
        """
        UPDATE memories SET position = r.place FROM (
            SELECT pk, ROW_NUMBER() OVER (
                PARTITION BY namespace, session_id ORDER BY pk) - 1 AS place
            FROM memories WHERE session_id IS NOT NULL
        ) AS r WHERE r.pk = memories.pk AND memories.position IS NULL;
        CREATE INDEX IF NOT EXISTS memories_ns_session_position
            ON memories(namespace, session_id, position);
        DROP INDEX IF EXISTS memories_ns_session;
        """,
    )


def m009_api_keys(db: sqlite3.Connection) -> None:
    """HTTP API keys: a key's SHA-256 (never the key), its tenant and shared namespaces."""
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS api_keys (
            id TEXT PRIMARY KEY,
            secret_hash TEXT NOT NULL,
            tenant TEXT NOT NULL,
            shared TEXT NOT NULL DEFAULT '[]',
            admin INTEGER NOT NULL DEFAULT 0,
            label TEXT,
            created_at REAL NOT NULL,
            revoked_at REAL
        );
        """,
    )


def m010_word_changes(db: sqlite3.Connection) -> None:
    """The log the word index beside a large store follows (``stores/sqlite/word_index``):
    the pk of every row inserted, deleted or given new content, once an index exists (the
    ``word_log`` key in ``meta``; until then nothing is written)."""
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS word_changes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            pk INTEGER NOT NULL
        );
        CREATE TRIGGER IF NOT EXISTS word_changes_ai AFTER INSERT ON memories
        WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'word_log') BEGIN
            INSERT INTO word_changes (pk) VALUES (new.pk);
        END;
        CREATE TRIGGER IF NOT EXISTS word_changes_ad AFTER DELETE ON memories
        WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'word_log') BEGIN
            INSERT INTO word_changes (pk) VALUES (old.pk);
        END;
        CREATE TRIGGER IF NOT EXISTS word_changes_au AFTER UPDATE OF content, namespace
        ON memories WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'word_log') BEGIN
            INSERT INTO word_changes (pk) VALUES (new.pk);
        END;
        """,
    )


def m011_live_time_index(db: sqlite3.Connection) -> None:
    """The (namespace, time) of the rows a search may return, in an index of their own:
    listing a time window's rows then never reads the table (a month of a 1M store, 42k
    rows, took 45 ms through the table's rows for ``forgotten_at``, 15 through this)."""
    run_script(
        db,
        """
        CREATE INDEX IF NOT EXISTS memories_ns_live_time ON memories(namespace, ref_time)
            WHERE forgotten_at IS NULL;
        """,
    )


def m012_word_change_stamps(db: sqlite3.Connection) -> None:
    """A random stamp on every entry of the word index's log: the index keeps the stamp of
    the last entry it reflects, so a store restored from a backup, whose log numbers its
    new entries again from where the backup stopped, is told apart from the one the index
    followed (``stores/sqlite/word_index``)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(word_changes)")}
    if "stamp" not in columns:
        db.execute("ALTER TABLE word_changes ADD COLUMN stamp INTEGER")
    run_script(
        db,
        """
        DROP TRIGGER IF EXISTS word_changes_ai;
        DROP TRIGGER IF EXISTS word_changes_ad;
        DROP TRIGGER IF EXISTS word_changes_au;
        CREATE TRIGGER word_changes_ai AFTER INSERT ON memories
        WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'word_log') BEGIN
            INSERT INTO word_changes (pk, stamp) VALUES (new.pk, random());
        END;
        CREATE TRIGGER word_changes_ad AFTER DELETE ON memories
        WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'word_log') BEGIN
            INSERT INTO word_changes (pk, stamp) VALUES (old.pk, random());
        END;
        CREATE TRIGGER word_changes_au AFTER UPDATE OF content, namespace
        ON memories WHEN EXISTS (SELECT 1 FROM meta WHERE key = 'word_log') BEGIN
            INSERT INTO word_changes (pk, stamp) VALUES (new.pk, random());
        END;
        """,
    )


def m013_collections(db: sqlite3.Connection) -> None:
    """Named collections: a root's ``name`` (unique per namespace), the context lines of a
    root and of sub-paths under it, and each indexed file's text (what ``get`` returns)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(source_roots)")}
    if "name" not in columns:
        db.execute("ALTER TABLE source_roots ADD COLUMN name TEXT")
    run_script(
        db,
        """
        CREATE UNIQUE INDEX IF NOT EXISTS source_roots_name ON source_roots(namespace, name)
            WHERE name IS NOT NULL;
        CREATE TABLE IF NOT EXISTS source_contexts (
            namespace TEXT NOT NULL,
            root TEXT NOT NULL,
            prefix TEXT NOT NULL,
            context TEXT NOT NULL,
            PRIMARY KEY (namespace, root, prefix)
        );
        CREATE TABLE IF NOT EXISTS source_texts (
            namespace TEXT NOT NULL,
            path TEXT NOT NULL,
            text TEXT NOT NULL,
            PRIMARY KEY (namespace, path)
        );
        """,
    )


def m014_word_counts(db: sqlite3.Connection) -> None:
    """Each row's token counts (:mod:`.word_counts`), which the store's writes fill; the
    triggers drop a row's counts when its content changes or it goes, whoever writes. A
    store that has rows marks them missing: the word index fills them once it serves the
    store (:func:`.word_counts.fill_missing`)."""
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS word_counts (
            pk INTEGER PRIMARY KEY,
            counts TEXT NOT NULL
        );
        CREATE TRIGGER IF NOT EXISTS word_counts_au AFTER UPDATE OF content ON memories
        BEGIN
            DELETE FROM word_counts WHERE pk = old.pk;
        END;
        CREATE TRIGGER IF NOT EXISTS word_counts_ad AFTER DELETE ON memories
        BEGIN
            DELETE FROM word_counts WHERE pk = old.pk;
        END;
        """,
    )
    if db.execute("SELECT 1 FROM memories LIMIT 1").fetchone() is not None:
        db.execute("INSERT OR IGNORE INTO meta VALUES (?, '0')", (word_counts.MISSING_FLAG,))


Migration = tuple[int, str, Callable[[sqlite3.Connection], None]]
MIGRATIONS: list[Migration] = [
    (1, "m001_initial", m001_initial),
    (2, "m002_sources", m002_sources),
    (3, "m003_embed_context", m003_embed_context),
    (4, "m004_forgotten_index", m004_forgotten_index),
    (5, "m005_tells_event", m005_tells_event),
    (6, "m006_no_idea_is_no_event", m006_no_idea_is_no_event),
    (7, "m007_tenants", m007_tenants),
    (8, "m008_session_position", m008_session_position),
    (9, "m009_api_keys", m009_api_keys),
    (10, "m010_word_changes", m010_word_changes),
    (11, "m011_live_time_index", m011_live_time_index),
    (12, "m012_word_change_stamps", m012_word_change_stamps),
    (13, "m013_collections", m013_collections),
    (14, "m014_word_counts", m014_word_counts),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def applied(db: sqlite3.Connection) -> set[int]:
    db.execute(
        "CREATE TABLE IF NOT EXISTS migrations "
        "(id INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    return {row[0] for row in db.execute("SELECT id FROM migrations")}


def migrate(db: sqlite3.Connection) -> list[str]:
    """Apply pending migrations in order; returns the names applied."""
    done: list[str] = []
    db.execute("BEGIN IMMEDIATE")
    try:
        have = applied(db)
        for number, name, step in MIGRATIONS:
            if number in have:
                continue
            step(db)
            db.execute("INSERT INTO migrations VALUES (?, ?, ?)", (number, name, time.time()))
            done.append(name)
        db.execute("INSERT OR IGNORE INTO meta VALUES ('app', ?)", (APP_ID,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return done
