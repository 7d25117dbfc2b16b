"""The word index beside a large store: top-k BM25 that stops once the top k is proven.

FTS5 scores every row that holds any query word: at 1M memories a question with a common
word reads 200k rows. From :data:`WORD_INDEX_MIN_ROWS` rows, when the optional ``tantivy``
package is installed (extra ``recalld[words]``), the word channel asks this index instead.
tantivy answers a disjunction with block-max WAND: it skips every block of rows whose best
possible score cannot enter the top k, so its top k is exact for its own scores.

What it indexes is FTS5's own tokens (:func:`recalld.lexical.tokenize_many`, the same
library and tokenizer as the store's ``memories_fts``), joined by spaces and split again on
whitespace, and the query is the same phrases (``"t1" OR "t2"``). What differs from FTS5 is
the score: tantivy's BM25 (k1 = 1.2, b = 0.75) takes Lucene's idf ``ln(1 + (N - n + 0.5) /
(n + 0.5))`` where FTS5 takes ``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, and keeps a
row's length in one byte. On the 100k scale store, the same top hit as FTS5 on 96.5% of
questions and every one of FTS5's top 10 inside its top 200 (docs/benchmarks-scale.md).

Every row is indexed with its namespace (the tenant wall is part of the query) and its pk;
forgotten and superseded rows are kept, as FTS5 keeps them, and the store's filters are
applied to the winners (:class:`TantivyWords`, the word channel's engine).

Staying current, across processes and crashes:

- The folder ``<db>.words/`` holds tantivy's files and ``covered.json``: the store's id and
  the last entry of the store's change log (``word_changes``, filled by triggers in the
  write's own transaction once ``meta.word_log`` exists) the index reflects, by its number
  and its random stamp. That entry stays in the log (the prune keeps it), so the index can
  tell that the store is still the one it followed: a store restored from a backup keeps its
  id, but its log stops before the mark, or numbers new entries again with other stamps.
- A writer brings the index up to date after its transaction (:meth:`WordIndex.sync`): the
  rows named in the log since ``covered`` are deleted from the index and added again as they
  are now, committed (atomically, by tantivy), ``covered`` written, the log pruned. Replaying
  an entry twice changes nothing, so a crash between the commit and ``covered`` loses nothing.
- A search catches up at most :data:`CATCH_UP_MAX` entries itself (another process's write,
  or one that crashed before its sync); further behind, or while another process holds the
  index, it stands aside and FTS5 answers.
- The index is built whole (into a new folder, renamed in place) when a writer first sees
  the store at :data:`WORD_INDEX_MIN_ROWS`, or when the folder is missing, unreadable or
  belongs to another store, or the store's log no longer holds the index's mark (restored
  from a backup, or replaced): the writer logs why. Until then, searches stand aside.
- Its folder and files are private to the store's owner (``0700`` / ``0600``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import os
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recalld import lexical
from recalld.private_files import make_private, private_file, private_folder, write_private_text
from recalld.stores.sqlite import word_counts
from recalld.stores.sqlite.readers import Scope, Winners, rescored, rows_max

log = logging.getLogger("recalld")

WORD_INDEX_MIN_ROWS = 50_000
"""From this many rows (the largest pk) the word channel reads the index. Below it FTS5
answers in a few milliseconds and no index is built (the ANN index starts at the same size)."""
CATCH_UP_MAX = 1_000
"""A search replays at most this many logged changes before it answers (about 0.1 s of
tokenizing); further behind, FTS5 answers and the next write brings the index up to date."""
BUILD_BATCH = 5_000
"""Rows read, tokenized and handed to tantivy at a time while building."""
WRITER_HEAP = 64_000_000
"""tantivy's indexing memory (split between its threads; at least 15 MB each)."""
LOCK_WAIT_S = 30.0
"""How long a writer waits for another process's build or catch-up before leaving it to the
next write (a search never waits)."""
WORDS_FIELD = "words"
WHITESPACE = "recalld_whitespace"


def words_available() -> bool:
    """Whether the optional ``tantivy`` package (extra ``recalld[words]``) is installed."""
    return importlib.util.find_spec("tantivy") is not None


@dataclass(frozen=True)
class Covered:
    """What ``covered.json`` says: the store the index belongs to and its last log entry."""

    store: str
    seq: int
    commit: str
    """Which write made the file (readers reopen their searcher when it changes)."""
    stamp: int | None = None
    """The random stamp of the log's entry ``seq`` (None: no such entry, or an entry logged
    before stamps existed)."""
    anchored: bool = True
    """False for a file written before stamps existed: only the number is checked."""


class TantivyWords:
    """The word channel's engine on a large store (a
    :class:`~recalld.stores.sqlite.readers.WordEngine`): the index picks the winners, the
    store scores them with FTS5's exact BM25 (:func:`~recalld.stores.sqlite.readers.rescored`),
    so that the channel returns FTS5's rows in FTS5's order with FTS5's scores."""

    name = "tantivy"

    def __init__(self, folder: Path) -> None:
        self.index = WordIndex(folder)
        self._broken = False
        """tantivy is installed but does not load: FTS5 answers from now on."""

    def top(
        self, scope: Scope, terms: tuple[str, ...], limit: int
    ) -> list[tuple[str, float]] | None:
        if self._broken or scope.rows_max < WORD_INDEX_MIN_ROWS:
            return None
        return rescored(scope, lexical.phrases(terms), self._winners, limit)

    def _winners(self, scope: Scope, phrases: list[list[str]], k: int) -> Winners | None:
        try:
            return self.index.top(scope.db, phrases, scope.visible, k)
        except ImportError as exc:
            log.warning("the word index is off: tantivy does not load (%s)", exc)
            self._broken = True
        except (OSError, ValueError) as exc:  # unreadable files: FTS5 this time
            log.warning("the word index could not answer (%s); FTS5 answers", exc)
            self.index.forget_searcher()
        return None

    def after_write(self, db: sqlite3.Connection) -> None:
        """Bring the index up to date (see :meth:`WordIndex.sync`). The write stands when
        that fails: the log keeps what the index still lacks."""
        if self._broken:
            return
        try:
            self.index.sync(db, rows_max(db))
        except (ImportError, OSError, ValueError, sqlite3.Error) as exc:
            log.warning("the word index was not brought up to date (%s); FTS5 answers", exc)


class WordIndex:
    """A tantivy index over every row's FTS5 tokens, beside one store file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._index: Any = None
        self._searcher: Any = None
        self._seen: Covered | None = None
        """The covered file the searcher was opened at."""
        self._namespaces: set[str] = set()
        """The namespaces the searcher's rows belong to."""
        self._warned: Covered | None = None
        """The covered file a search last warned about (once per file, not per search)."""

    # -- reading --------------------------------------------------------------------------

    def top(
        self,
        db: sqlite3.Connection,
        phrases: Sequence[Sequence[str]],
        namespaces: Sequence[str],
        k: int,
    ) -> Winners | None:
        """The ``k`` best rows of ``namespaces`` for the OR of ``phrases``, best first; None
        when the index cannot answer now (absent, too far behind, or another process is
        bringing it up to date)."""
        with self._lock:
            if not self._ready(db):
                return None
            searcher, held = self._searcher, self._namespaces
        import tantivy

        clauses, counts = _fts5_weighted(searcher, self._index.schema, phrases)
        if not clauses:
            return Winners([], counts)
        schema = self._index.schema
        query = tantivy.Query.boolean_query(clauses)
        if not held <= set(namespaces):
            # Other tenants' rows are in the index: the wall goes into the query. (Only a
            # disjunction alone is pruned, so a store of one tenant leaves it to the join.)
            query = tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, query),
                    (
                        tantivy.Occur.Must,
                        tantivy.Query.term_set_query(schema, "namespace", list(namespaces)),
                    ),
                ]
            )
        hits = searcher.search(query, k, count=False).hits
        pks = searcher.fast_field_values("pk", [address for _, address in hits])
        found = [(int(pk), float(score)) for (score, _), pk in zip(hits, pks, strict=True)]
        return Winners(found, counts)

    def forget_searcher(self) -> None:
        """Open the index again on the next search (its files failed to read)."""
        with self._lock:
            self._index = self._searcher = self._seen = None

    def _ready(self, db: sqlite3.Connection) -> bool:
        """Open the index, replay a short tail of the log, and reopen the searcher when the
        folder changed; False when a search should not wait for it."""
        covered = self._read_covered()
        if covered is None or not self._follows(db, covered):
            return False
        newest = _newest(db)
        if newest > covered.seq:
            if newest - covered.seq > CATCH_UP_MAX:
                return False
            with self._exclusive(wait=False) as held:
                caught_up = self._catch_up(db) if held else None
            if caught_up is None:
                return False
            covered = caught_up
        return self._open_searcher(covered)

    def _follows(self, db: sqlite3.Connection, covered: Covered) -> bool:
        """Whether the index follows this store's log (a search stands aside if not: the
        next write rebuilds it). A mismatch seen while another process moved the mark and
        pruned the log is no mismatch: this search stands aside without a word."""
        reason = _diverged(db, covered)
        if reason is None:
            return True
        if self._read_covered() == covered and self._warned != covered:
            self._warned = covered
            log.warning(
                "the word index %s does not follow the store: %s; FTS5 answers "
                "until the next write rebuilds it",
                self.folder,
                reason,
            )
        return False

    def _open_searcher(self, covered: Covered) -> bool:
        if self._searcher is not None and self._seen == covered:
            return True
        try:
            if self._index is None:
                self._index = _open(self.folder)
            self._index.reload()
            self._searcher = self._index.searcher()
            # Namespaces of deleted rows linger until a merge: the set errs on the side of
            # putting the wall into the query.
            self._namespaces = {t for t, _ in self._searcher.terms_with_prefix("namespace", "")}
        except (OSError, ValueError) as exc:
            log.warning("the word index %s cannot be read (%s); FTS5 answers", self.folder, exc)
            self._index = self._searcher = None
            return False
        self._seen = covered
        return True

    def _read_covered(self) -> Covered | None:
        try:
            data = json.loads((self.folder / "covered.json").read_text(encoding="utf-8"))
            stamp = data.get("stamp")
            return Covered(
                str(data["store"]),
                int(data["seq"]),
                str(data.get("commit", "")),
                None if stamp is None else int(stamp),
                "stamp" in data,
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    # -- writing --------------------------------------------------------------------------

    def sync(self, db: sqlite3.Connection, rows: int) -> None:
        """After a write: build the index once the store holds ``WORD_INDEX_MIN_ROWS`` rows
        (or when it is missing or another store's), else replay the log into it and prune
        the log. Skipped, with the log kept, while another process holds the index longer
        than ``LOCK_WAIT_S``: the next write or search replays it."""
        if rows < WORD_INDEX_MIN_ROWS and not self.folder.exists():
            return
        with self._exclusive(wait=True) as held:
            if not held:
                log.info(
                    "the word index %s is busy in another process; left for later", self.folder
                )
                return
            with self._lock:
                covered = self._read_covered()
                reason = "it is missing" if covered is None else _diverged(db, covered)
                if reason is not None:
                    if covered is not None:
                        log.warning("rebuilding the word index %s: %s", self.folder, reason)
                    covered = self._build(db)
                else:
                    covered = self._catch_up(db)
                if covered is not None:
                    _prune(db, covered.seq)
            # Rows written before their counts were: scored from their texts until then.
            word_counts.fill_missing(db, word_counts.FILL_CHUNKS)

    def _catch_up(self, db: sqlite3.Connection) -> Covered | None:
        """Replay the log past ``covered`` (the caller holds the folder's lock)."""
        covered = self._read_covered()
        if covered is None:
            return None
        db.execute("BEGIN")
        try:
            if _diverged(db, covered) is not None:  # (rebuilt by the next write)
                return None
            newest = _newest(db)
            pks = [
                r[0]
                for r in db.execute(
                    "SELECT DISTINCT pk FROM word_changes WHERE seq > ? AND seq <= ?",
                    (covered.seq, newest),
                )
            ]
            rows = _rows(db, pks)
            stamp = _stamp(db, newest)
        finally:
            db.execute("COMMIT")
        if newest <= covered.seq:
            return covered
        try:  # (no pks: the entries were rolled back or pruned; only ``covered`` moves)
            if pks:
                self._replay(pks, rows)
        except (OSError, ValueError) as exc:
            log.warning("the word index %s could not be brought up to date (%s)", self.folder, exc)
            self._index = self._searcher = None
            return None
        return _write_covered(self.folder, covered.store, newest, stamp)

    def _replay(self, pks: Sequence[int], rows: Sequence[Sequence[Any]]) -> None:
        """Delete the rows ``pks`` from the index and add ``rows`` (their state now)."""
        import tantivy

        if self._index is None:
            self._index = _open(self.folder)
        writer = self._index.writer(WRITER_HEAP, 1)
        schema = self._index.schema
        for pk in pks:  # (by_term takes a Python int as i64: it would match nothing)
            writer.delete_documents_by_query(tantivy.Query.term_query(schema, "pk", pk))
        _add(writer, rows)
        writer.commit()
        writer.wait_merging_threads()
        del writer  # releases tantivy's lock
        make_private(self.folder)  # tantivy writes its new files with its own modes

    def _build(self, db: sqlite3.Connection) -> Covered:
        """Index every row into a new folder and put it in place of the old one."""
        store = _enable_log(db)
        started = time.monotonic()
        building = self.folder.with_name(f"{self.folder.name}.building-{secrets.token_hex(4)}")
        private_folder(building)
        index = _open(building, create=True)
        writer = index.writer(WRITER_HEAP, max(1, min(2, os.cpu_count() or 1)))
        db.execute("BEGIN")  # one snapshot: the rows as of the log's newest entry
        try:
            newest = _newest(db)
            stamp = _stamp(db, newest)
            cursor = db.execute("SELECT pk, namespace, content FROM memories")
            count = 0
            while batch := cursor.fetchmany(BUILD_BATCH):
                _add(writer, batch)
                count += len(batch)
        finally:
            db.execute("COMMIT")
        writer.commit()
        writer.wait_merging_threads()
        del writer
        make_private(building)
        done = _write_covered(building, store, newest, stamp)
        self._index = self._searcher = None
        old = self.folder.with_name(f"{self.folder.name}.old-{secrets.token_hex(4)}")
        if self.folder.exists():
            os.replace(self.folder, old)
        os.replace(building, self.folder)
        shutil.rmtree(old, ignore_errors=True)
        log.info(
            "built the word index %s: %d rows in %.1f s",
            self.folder,
            count,
            time.monotonic() - started,
        )
        return done

    @contextlib.contextmanager
    def _exclusive(self, wait: bool) -> Iterator[bool]:
        """The folder's lock across processes (a lock file beside it); yields whether held."""
        try:
            import fcntl
        except ImportError:  # no flock: one process at a time cannot be ensured
            yield False
            return
        path = self.folder.with_name(self.folder.name + ".lock")
        private_file(path)
        with open(path, "a+b") as handle:
            deadline = time.monotonic() + (LOCK_WAIT_S if wait else 0.0)
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.05)
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _fts5_weighted(
    searcher: Any, schema: Any, phrases: Sequence[Sequence[str]]
) -> tuple[list[Any], list[int]]:
    """One SHOULD clause per phrase that occurs, boosted from tantivy's idf (Lucene's, summed
    over a phrase's words) to FTS5's (of the phrase), so that a row scores FTS5's BM25 but
    for its length, which tantivy keeps in one byte (exact up to about 40 words); and the
    rows holding each phrase."""
    import tantivy

    rows = searcher.num_docs
    clauses = []
    holding = []
    for phrase in phrases:
        counts = [searcher.doc_freq(WORDS_FIELD, token) for token in phrase]
        holding.append(0)
        if not all(counts):
            continue
        if len(phrase) == 1:
            query = tantivy.Query.term_query(schema, WORDS_FIELD, phrase[0])
            hits = counts[0]
        else:
            query = tantivy.Query.phrase_query(schema, WORDS_FIELD, list(phrase))
            hits = searcher.search(query, 1, count=True).count
        if not hits:
            continue
        holding[-1] = hits
        lucene = sum(math.log(1 + (rows - n + 0.5) / (n + 0.5)) for n in counts)
        boost = lexical.idf(rows, hits) / lucene
        clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(query, boost)))
    return clauses, holding


def _open(folder: Path, create: bool = False) -> Any:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("pk", stored=False, indexed=True, fast=True)
    builder.add_text_field("namespace", tokenizer_name="raw", index_option="basic")
    builder.add_text_field(WORDS_FIELD, tokenizer_name=WHITESPACE, index_option="position")
    if not create and not tantivy.Index.exists(str(folder)):
        raise ValueError("no index in the folder")
    index = tantivy.Index(builder.build(), path=str(folder), reuse=not create)
    index.register_tokenizer(
        WHITESPACE, tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
    )
    return index


def _add(writer: Any, rows: Sequence[Sequence[Any]]) -> None:
    """Index (pk, namespace, content) rows with their FTS5 tokens."""
    import tantivy

    for (pk, namespace, _), tokens in zip(
        rows, lexical.tokenize_many([r[2] for r in rows]), strict=True
    ):
        document = tantivy.Document()
        document.add_unsigned("pk", int(pk))
        document.add_text("namespace", namespace)
        document.add_text(WORDS_FIELD, " ".join(tokens))
        writer.add_document(document)


def _rows(db: sqlite3.Connection, pks: Sequence[int]) -> list[tuple[int, str, str]]:
    out: list[tuple[int, str, str]] = []
    for start in range(0, len(pks), 500):
        chunk = list(pks[start : start + 500])
        out.extend(
            tuple(r)
            for r in db.execute(
                f"SELECT pk, namespace, content FROM memories WHERE pk IN"
                f" ({','.join('?' * len(chunk))})",
                chunk,
            )
        )
    return out


def _newest(db: sqlite3.Connection) -> int:
    found = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'word_changes'").fetchone()
    return int(found[0]) if found else 0


def _stamp(db: sqlite3.Connection, seq: int) -> int | None:
    found = db.execute("SELECT stamp FROM word_changes WHERE seq = ?", (seq,)).fetchone()
    return None if found is None or found[0] is None else int(found[0])


def _diverged(db: sqlite3.Connection, covered: Covered) -> str | None:
    """Why the index cannot follow this store's log from its mark; None when it can."""
    if covered.store != _store_id(db):
        return "it belongs to another store"
    newest = _newest(db)
    if newest < covered.seq:
        return (
            f"the store's change log ends at entry {newest}, before the index's mark "
            f"{covered.seq} (was the store restored from a backup?)"
        )
    if covered.anchored and _stamp(db, covered.seq) != covered.stamp:
        return (
            f"the store's change log entry {covered.seq} is not the one the index "
            "reflects (was the store restored from a backup?)"
        )
    return None


def _store_id(db: sqlite3.Connection) -> str | None:
    found = db.execute("SELECT value FROM meta WHERE key = 'word_log'").fetchone()
    return str(found[0]) if found else None


def _enable_log(db: sqlite3.Connection) -> str:
    """Turn the change log on (its value names this store), in a transaction of its own so
    that every later write is logged before the build reads its snapshot."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("INSERT OR IGNORE INTO meta VALUES ('word_log', ?)", (secrets.token_hex(8),))
        store = _store_id(db)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    assert store is not None
    return store


def _prune(db: sqlite3.Connection, seq: int) -> None:
    """Drop the log entries the index reflects but its mark (a busy store keeps them for
    later)."""
    try:
        db.execute("DELETE FROM word_changes WHERE seq < ?", (seq,))
    except sqlite3.OperationalError as exc:
        log.info("the word log was not pruned (%s); the next write will", exc)


def _write_covered(folder: Path, store: str, seq: int, stamp: int | None) -> Covered:
    """Record (atomically) that the index in ``folder`` reflects the log through ``seq``,
    whose entry has the stamp ``stamp``."""
    covered = Covered(store, seq, secrets.token_hex(8), stamp)
    written = {"store": store, "seq": seq, "commit": covered.commit, "stamp": stamp}
    write_private_text(folder / "covered.json", json.dumps(written))
    return covered
