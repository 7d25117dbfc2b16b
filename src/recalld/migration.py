"""Copy a tenant's memories from one store to another (SQLite to PostgreSQL and back)
without re-embedding, verified by counts and a content + vector checksum."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from recalld.errors import EmbedderMismatchError, InvalidInputError
from recalld.stores import SourceIndex, Store, Tenancy, open_store
from recalld.stores.base import bulk_loading

BATCH = 1000


@dataclass(frozen=True)
class MigrationReport:
    """What ``recalld migrate`` copied, and the proof that both sides hold the same."""

    tenant: str
    memories: int
    """Memories copied (forgotten ones included)."""
    with_vectors: int
    checksum: str
    """sha256 over every memory's namespace, id, content and vector bytes, in id order:
    the same on both sides."""
    fingerprint: str | None
    source_files: int


def migrate_store(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    tenant: str = "default",
    batch: int = BATCH,
    progress: Callable[[int], None] | None = None,
) -> MigrationReport:
    """Copy ``tenant``'s own namespace from ``source`` to ``destination`` (a file or a
    ``postgresql://`` DSN each), vectors included; the destination's namespace must be
    empty. A shared namespace is copied by naming it as the tenant.

    The destination is marked unfinished before the first row is written and cleared only
    once the copy verifies: an interrupted copy is never taken for a whole one (the engine
    refuses to use it and ``status`` says so), and running the same migration again removes
    the partial copy and redoes it. Run again after it finished, it verifies and reports the
    copy (nothing is written).

    Raises:
        EmbedderMismatchError: the destination holds vectors of another embedder.
        InvalidInputError: the destination already holds other memories of this tenant.
        StoreError: the copy does not verify (counts or checksum differ).
    """
    tenancy = Tenancy(tenant)
    src = open_store(source, tenancy)
    try:
        dst = open_store(destination, tenancy)
        try:
            return _copy(src, dst, tenant, batch, progress)
        finally:
            dst.close()
    finally:
        src.close()


def _copy(
    src: Store, dst: Store, tenant: str, batch: int, progress: Callable[[int], None] | None
) -> MigrationReport:
    fingerprint = src.get_fingerprint()
    theirs = dst.get_fingerprint()
    if dst.any_vectors() and fingerprint is not None and theirs != fingerprint:
        raise EmbedderMismatchError(
            "the destination holds vectors of another embedder; copying would mix two "
            "embedders' vectors in one store: reindex one side first"
        )
    held = dst.stats()
    if held.unfinished_migration:
        _remove_partial_copy(dst, tenant, batch)
    elif held.memories or held.forgotten:
        if checksum(dst, tenant) == checksum(src, tenant):  # a run that finished: say so
            files = len(src.source_files()) if isinstance(src, SourceIndex) else 0
            return _verify(src, dst, tenant, fingerprint, files)
        raise InvalidInputError(
            f"the destination already holds {held.memories + held.forgotten} memories of "
            f"tenant {tenant!r}; copy into an empty store or tenant"
        )
    dst.mark_migration(True)
    if fingerprint is not None:
        dst.set_fingerprint(fingerprint)
    with bulk_loading(dst):
        for rows in src.export(batch):
            own = [(m, v) for m, v in rows if m.namespace == tenant]
            with_vector = [(m, v) for m, v in own if v is not None]
            without = [m for m, v in own if v is None]
            if with_vector:
                dst.insert([m for m, _ in with_vector], np.stack([v for _, v in with_vector]))
            if without:
                dst.insert(without, None)
            if progress is not None:
                progress(len(own))
    files = 0
    if isinstance(src, SourceIndex) and isinstance(dst, SourceIndex):
        for root in src.source_roots():
            dst.save_source_root(root)
        for line in src.source_contexts():
            dst.save_source_context(line.root, line.prefix, line.text)
        tracked = src.source_files()
        dst.save_source_files(tracked)
        dst.save_source_texts(src.source_texts([f.path for f in tracked]))
        files = len(tracked)
    report = _verify(src, dst, tenant, fingerprint, files)
    dst.mark_migration(False)
    return report


def _remove_partial_copy(dst: Store, tenant: str, batch: int) -> None:
    """Delete what an interrupted migration left of ``tenant`` (memories, indexed files)."""
    ids = [m.id for rows in dst.export(batch) for m, _ in rows if m.namespace == tenant]
    for start in range(0, len(ids), batch):
        dst.forget(ids[start : start + batch], hard=True, at=datetime.now(UTC))
    if isinstance(dst, SourceIndex):
        dst.remove_source_files([f.path for f in dst.source_files()])


def checksum(store: Store, namespace: str) -> tuple[str, int, int]:
    """(sha256, memories, with vectors) of a namespace's memories, contents and vectors."""
    digests: dict[str, bytes] = {}
    vectors = 0
    for rows in store.export(BATCH):
        for memory, vector in rows:
            if memory.namespace != namespace:
                continue
            h = hashlib.sha256()
            for part in (memory.namespace or "", memory.id, memory.content):
                h.update(part.encode("utf-8") + b"\x00")
            if vector is not None:
                h.update(np.asarray(vector, dtype="<f4").tobytes())
                vectors += 1
            digests[memory.id] = h.digest()
    total = hashlib.sha256()
    for memory_id in sorted(digests):
        total.update(digests[memory_id])
    return total.hexdigest(), len(digests), vectors


def _verify(
    src: Store, dst: Store, tenant: str, fingerprint: str | None, files: int
) -> MigrationReport:
    from recalld.errors import StoreError

    before, after = checksum(src, tenant), checksum(dst, tenant)
    if before != after:
        raise StoreError(
            f"the copy does not verify: source (checksum, memories, vectors) {before}, "
            f"destination {after}"
        )
    return MigrationReport(tenant, before[1], before[2], before[0], fingerprint, files)
