"""A persistent embedding cache keyed by embedder fingerprint + content hash."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from recalld.errors import StoreError
from recalld.private_files import private_file, private_folder
from recalld.providers.embedders import Embedder, EmbeddingBatch, Fingerprint, Vectors
from recalld.stores.sqlite.locking import LOCK_WAIT_S, enable_wal
from recalld.text import content_hash

CACHE_COMMIT_TEXTS = 256
"""Texts embedded between two writes to the cache: an interrupted run (Ctrl-C during
``recalld index`` of a large file, whose chunks are stored only together) keeps every span
it finished, and the next run embeds only the rest. A write costs about a millisecond; a
span of 256 chunks, seconds of a CPU model. Spans hold texts of similar length (sorted by
characters), so the model's batches stay as evenly padded as in one sorted call."""


class EmbeddingCache:
    """One SQLite file, private to its owner (its vectors say much about the texts); safe
    to share between processes (WAL, short transactions, each waiting up to
    ``LOCK_WAIT_S`` for another's lock) and between threads: a server's threads share this
    connection, and sqlite3 does not serialise statements on one connection (interleaved
    they fail with "database is locked" or ``SystemError``), so every use holds ``_lock``."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        try:
            private_folder(path.parent)
            private_file(path)  # (SQLite gives its -wal and -shm the file's own mode)
            self._db = sqlite3.connect(path, timeout=LOCK_WAIT_S, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"cannot open the embedding cache {path} ({exc}); set cache_dir to a writable "
                "folder"
            ) from exc
        try:
            enable_wal(self._db)
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS embeddings (fingerprint TEXT, hash TEXT,"
                " windows INTEGER, vector BLOB, PRIMARY KEY (fingerprint, hash)) WITHOUT ROWID"
            )
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreError(
                f"the embedding cache {path} is unusable ({exc}); delete it (it is only a cache)"
            ) from exc

    def get_many(self, fingerprint: str, hashes: Sequence[str]) -> dict[str, tuple[bytes, int]]:
        found: dict[str, tuple[bytes, int]] = {}
        with self._lock:
            for start in range(0, len(hashes), 500):
                chunk = list(hashes[start : start + 500])
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT hash, vector, windows FROM embeddings WHERE fingerprint = ?"
                    f" AND hash IN ({marks})",
                    [fingerprint, *chunk],
                )
                found.update({h: (v, w) for h, v, w in rows})
        return found

    def put_many(self, fingerprint: str, items: Sequence[tuple[str, bytes, int]]) -> None:
        with self._lock, self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)",
                [(fingerprint, h, w, v) for h, v, w in items],
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedEmbedder(Embedder):
    """Wraps an embedder; documents already embedded under the same fingerprint are reused."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache) -> None:
        self.inner = inner
        self.cache = cache
        self.batch_size = inner.batch_size
        self.batch_tokens = inner.batch_tokens
        self.hits = 0
        self.misses = 0

    @property
    def fingerprint(self) -> Fingerprint:
        return self.inner.fingerprint

    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        return self.inner.embed_batch(texts, is_query=is_query)

    @property
    def query_path(self) -> str:
        return self.inner.query_path

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return self.inner.token_counts(texts)

    def embed_query(self, text: str) -> Vectors:
        return self.inner.embed_query(text)

    def embed_documents(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> EmbeddingBatch:
        """Cached vectors where there are; the misses go to the inner embedder a span of
        :data:`CACHE_COMMIT_TEXTS` at a time, each span written to the cache as it is done."""
        key = self.fingerprint.key
        dim = self.fingerprint.dimension
        hashes = [content_hash(t) for t in texts]
        found = self.cache.get_many(key, sorted(set(hashes)))
        missing = sorted({h: i for i, h in enumerate(hashes) if h not in found}.items())
        if progress is not None and len(texts) > len(missing):
            progress(len(texts) - len(missing))
        # Shortest first, a span at a time, each span kept once embedded (see
        # CACHE_COMMIT_TEXTS): an interrupted run keeps what it finished.
        missing.sort(key=lambda pair: len(texts[pair[1]]))
        for start in range(0, len(missing), CACHE_COMMIT_TEXTS):
            span = missing[start : start + CACHE_COMMIT_TEXTS]
            fresh = self.inner.embed_documents([texts[i] for _, i in span], progress)
            items = [
                (h, fresh.vectors[n].tobytes(), fresh.windows[n]) for n, (h, _) in enumerate(span)
            ]
            self.cache.put_many(key, items)
            found.update({h: (v, w) for h, v, w in items})
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        vectors = np.zeros((len(texts), dim), dtype=np.float32)
        for row, h in enumerate(hashes):
            vectors[row] = np.frombuffer(found[h][0], dtype=np.float32)
        return EmbeddingBatch(vectors, tuple(found[h][1] for h in hashes))
