"""Incremental, crash-safe indexing of markdown memory workspaces.

:func:`index_sources` runs these stages:

1. **Roots**: the paths given (checked before anything is written), or every registered root.
2. **Scan**: each root's globs, ``stat`` only (:mod:`.discover`).
3. **Plan**: new, changed (size or mtime), pending or re-chunked files are candidates;
   tracked files no longer matched are removed. Unchanged files are not even read.
4. **Mark**: candidates are recorded as ``pending`` in one transaction, so a run that dies
   leaves its unfinished work visible (``recalld status``) and the next run does it.
5. **Count**: the chunks to embed, so progress is reported in chunks from the start (each
   changed file is read and chunked here, and again in stage 6: only counts are kept).
6. **Index**: each candidate is read and hashed (an unchanged hash only refreshes the record),
   chunked (:mod:`.chunking`), embedded a group of files at a time, and written file by file,
   each in ONE transaction that deletes its old chunks, inserts the new ones and marks it
   ``indexed``: a kill at any moment leaves every file either fully old or fully new. Only
   one group's texts are held at a time (about ``EMBED_GROUP_CHUNKS`` chunks, or one file's).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from recalld.errors import InvalidInputError
from recalld.providers.embedders import Vectors
from recalld.records import Memory, NewMemory, Source
from recalld.sources.chunking import ChunkParams, chunk_markdown
from recalld.sources.dates import event_time_for
from recalld.sources.discover import (
    DEFAULT_GLOBS,
    FoundFile,
    Problem,
    Scan,
    check_globs,
    folder_markdown_count,
    normalize_root,
    scan_root,
)
from recalld.sources.reading import MAX_FILE_BYTES, FileText, SourceReadError, read_text
from recalld.stores.base import SourceFile, SourceIndex, SourceRoot

EMBED_GROUP_CHUNKS = 64
"""Chunks embedded together across small files (batching speeds the model up); files are
still committed one transaction each."""

IndexProgress = Callable[[int, int], None]
"""Called with (chunks done, chunks to embed): once before any work, then as files are
committed."""


@dataclass(frozen=True)
class IndexOptions:
    """How to index; every field has a working default."""

    globs: tuple[str, ...] | None = None
    """Files to pick under each folder; None keeps a root's registered globs (or defaults)."""
    force: bool = False
    """Re-chunk and re-embed every file, changed or not."""
    max_file_bytes: int = MAX_FILE_BYTES
    chunking: ChunkParams = field(default_factory=ChunkParams)
    allow_empty: bool = False
    """Accept paths that match no file (``watch`` waits for files to appear)."""
    follow_symlinks: bool = False
    """Follow symbolic links that lead out of a workspace (skipped with a warning if not)."""
    name: str | None = None
    """The collection name to give the one root indexed (checked by the caller)."""


@dataclass(frozen=True)
class IndexDeps:
    """What the indexer needs from the engine (given by :meth:`MemoryEngine.index`)."""

    store: SourceIndex
    embed: Callable[[Sequence[str]], Vectors]
    """Document embeddings, one row per text."""
    fingerprint: Callable[[], str]
    """Loads the embedder, refuses one whose fingerprint differs from the store's, and
    returns the fingerprint to record with the vectors."""
    prepare: Callable[[NewMemory], Memory]
    """Validates and completes a memory (hash, entities, timestamps)."""
    clock: Callable[[], datetime]


@dataclass(frozen=True)
class IndexReport:
    """What an index run did."""

    roots: tuple[str, ...]
    files: int
    """Files the roots' globs match now."""
    indexed: tuple[str, ...]
    """Files (re)chunked and (re)embedded in this run."""
    unchanged: int
    removed: tuple[str, ...]
    """Files gone from disk (or no longer matched) whose chunks were deleted."""
    chunks_added: int
    chunks_removed: int
    problems: tuple[Problem, ...]
    bytes_indexed: int
    total_chunks: int
    """Chunks of these roots in the store after the run."""
    seconds: float

    @property
    def empty(self) -> bool:
        """Nothing of these roots is searchable: the silent failure to never hide."""
        return self.total_chunks == 0


@dataclass
class _Pending:
    """A read and chunked file waiting for its group's embeddings."""

    found: FoundFile
    record: SourceFile
    memories: list[Memory]
    text: str
    """The text the chunks were made from, kept with them (what ``get`` returns)."""
    replaced: int
    """Chunks of the previous version that the write deletes."""


@dataclass
class _Tally:
    indexed: list[str] = field(default_factory=list)
    unchanged: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    bytes_indexed: int = 0
    problems: list[Problem] = field(default_factory=list)


def index_sources(
    paths: Sequence[str],
    options: IndexOptions,
    deps: IndexDeps,
    progress: IndexProgress | None = None,
) -> IndexReport:
    """Bring the index of ``paths`` (or of every registered root) up to date."""
    started = time.perf_counter()
    roots = _resolve_roots(paths, options, deps.store)
    scans = [scan_root(r.path, r.globs, options.follow_symlinks) for r in roots]
    tracked = {f.path: f for f in deps.store.source_files()}
    found = _claimed(scans)
    if not found and not options.allow_empty and not _tracked_under(tracked, roots):
        raise InvalidInputError(_nothing_matched(roots))
    chunker = options.chunking.descriptor
    candidates = [
        f for f in found.values() if _needs_work(f, tracked.get(f.path), options, chunker)
    ]
    live_roots = {s.root for s in scans if not s.missing}
    gone = sorted(p for p, t in tracked.items() if t.root in live_roots and p not in found)
    # A wrong model is refused before anything is written.
    fingerprint = deps.fingerprint() if candidates else ""
    for root in roots:
        deps.store.save_source_root(root)
    deps.store.save_source_files(_pending_records(candidates, tracked))
    tally = _Tally(problems=[p for s in scans for p in s.problems])
    tally.chunks_removed += deps.store.remove_source_files(gone)
    tally.unchanged = len(found) - len(candidates)
    _index_files(candidates, tracked, options, deps, tally, fingerprint, progress)
    now = deps.clock()
    for root in roots:
        deps.store.save_source_root(replace(root, indexed_at=now))
    total = sum(f.chunks for f in deps.store.source_files([r.path for r in roots]))
    return IndexReport(
        roots=tuple(r.path for r in roots),
        files=len(found),
        indexed=tuple(tally.indexed),
        unchanged=tally.unchanged,
        removed=tuple(gone),
        chunks_added=tally.chunks_added,
        chunks_removed=tally.chunks_removed,
        problems=tuple(tally.problems),
        bytes_indexed=tally.bytes_indexed,
        total_chunks=total,
        seconds=time.perf_counter() - started,
    )


# -- 1. roots ----------------------------------------------------------------------------


def resolve_roots(
    paths: Sequence[str], globs: tuple[str, ...] | None, store: SourceIndex
) -> list[SourceRoot]:
    """The roots a run or a watch covers; bad paths or globs raise before any change."""
    return _resolve_roots(paths, IndexOptions(globs=globs), store)


def _resolve_roots(
    paths: Sequence[str], options: IndexOptions, store: SourceIndex
) -> list[SourceRoot]:
    if options.globs is not None:
        try:
            check_globs(options.globs)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
    known = {r.path: r for r in store.source_roots()}
    if not paths:
        if not known:
            raise InvalidInputError(
                "no workspace is indexed yet: run `recalld index PATH` (a folder holding "
                "MEMORY.md and memory/*.md, or a markdown file)"
            )
        return [replace(r, globs=options.globs or r.globs) for r in known.values()]
    roots: dict[str, SourceRoot] = {}
    for raw in paths:
        path = normalize_root(raw)
        scan = scan_root(path, ())
        if scan.missing:
            raise InvalidInputError(f"{raw}: {scan.problems[0].message}")
        previous = known.get(path)
        globs = options.globs or (previous.globs if previous else DEFAULT_GLOBS)
        name = options.name or (previous.name if previous else None)
        roots.setdefault(path, SourceRoot(path, globs, name=name))
    return list(roots.values())


def _nothing_matched(roots: list[SourceRoot]) -> str:
    parts = []
    for root in roots:
        extra = folder_markdown_count(root.path)
        hint = (
            f"; it holds {extra} other .md file(s): pass --glob '**/*.md' to index them"
            if extra
            else ""
        )
        parts.append(f"no file under {root.path} matches {', '.join(root.globs)}{hint}")
    return "nothing to index: " + "; ".join(parts)


# -- 2-4. scan, plan, mark -----------------------------------------------------------------


def _claimed(scans: list[Scan]) -> dict[str, FoundFile]:
    """Every matched file once; the first root that matches a file owns it."""
    found: dict[str, FoundFile] = {}
    for scan in scans:
        for f in scan.files:
            found.setdefault(f.path, f)
    return found


def _tracked_under(tracked: dict[str, SourceFile], roots: list[SourceRoot]) -> bool:
    names = {r.path for r in roots}
    return any(t.root in names for t in tracked.values())


def _needs_work(f: FoundFile, old: SourceFile | None, options: IndexOptions, chunker: str) -> bool:
    if old is None or options.force:
        return True
    return (
        old.status != "indexed"
        or old.chunker != chunker
        or old.root != f.root
        or (old.size, old.mtime_ns) != (f.size, f.mtime_ns)
    )


def _pending_records(
    candidates: list[FoundFile], tracked: dict[str, SourceFile]
) -> list[SourceFile]:
    """Candidates marked pending; the hash and chunker of what is indexed are kept."""
    out = []
    for f in candidates:
        old = tracked.get(f.path)
        out.append(
            SourceFile(
                f.path,
                f.root,
                f.size,
                f.mtime_ns,
                "pending",
                content_hash=old.content_hash if old else None,
                chunker=old.chunker if old else None,
                indexed_at=old.indexed_at if old else None,
            )
        )
    return out


# -- 5. count ----------------------------------------------------------------------------


def _chunks_to_embed(
    candidates: list[FoundFile], tracked: dict[str, SourceFile], options: IndexOptions
) -> int:
    """How many chunks stage 6 will embed; files it will skip (unreadable, unchanged) count 0."""
    chunker = options.chunking.descriptor
    total = 0
    for f in candidates:
        try:
            text = read_text(f.path, options.max_file_bytes)
        except SourceReadError:
            continue
        old = tracked.get(f.path)
        if (
            old is not None
            and not options.force
            and (old.content_hash, old.chunker) == (text.sha256, chunker)
        ):
            continue
        total += len(chunk_markdown(text.text, options.chunking))
    return total


# -- 6. index ----------------------------------------------------------------------------


def _index_files(
    candidates: list[FoundFile],
    tracked: dict[str, SourceFile],
    options: IndexOptions,
    deps: IndexDeps,
    tally: _Tally,
    fingerprint: str,
    progress: IndexProgress | None,
) -> None:
    group: list[_Pending] = []
    total = _chunks_to_embed(candidates, tracked, options) if progress is not None else 0
    done = 0

    def advance(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, max(total, done))

    advance(0)
    for f in candidates:
        item = _prepare_file(f, tracked.get(f.path), options, deps, tally)
        if item is None:
            continue
        group.append(item)
        if sum(len(g.memories) for g in group) >= EMBED_GROUP_CHUNKS:
            _write_group(group, deps, tally, fingerprint, advance)
            group = []
    _write_group(group, deps, tally, fingerprint, advance)


def _prepare_file(
    f: FoundFile, old: SourceFile | None, options: IndexOptions, deps: IndexDeps, tally: _Tally
) -> _Pending | None:
    """Read and chunk one file; None when it needs no embedding (unchanged, or an error)."""
    chunker = options.chunking.descriptor
    try:
        text = read_text(f.path, options.max_file_bytes)
    except SourceReadError as exc:
        _record_error(f, old, str(exc), deps, tally)
        return None
    same = old is not None and (old.content_hash, old.chunker) == (text.sha256, chunker)
    if same and not options.force:
        assert old is not None
        deps.store.save_source_files(
            [
                replace(
                    old,
                    root=f.root,
                    size=text.size,
                    mtime_ns=text.mtime_ns,
                    status="indexed",
                    error=None,
                )
            ]
        )
        tally.unchanged += 1
        return None
    try:
        memories = chunk_memories(f, text, options.chunking, deps.prepare)
    except InvalidInputError as exc:
        _record_error(f, old, str(exc), deps, tally)
        return None
    record = SourceFile(
        f.path,
        f.root,
        text.size,
        text.mtime_ns,
        "indexed",
        text.sha256,
        chunker,
        None,
        deps.clock(),
    )
    tally.bytes_indexed += text.size
    return _Pending(f, record, memories, text.text, old.chunks if old else 0)


def _record_error(
    f: FoundFile, old: SourceFile | None, message: str, deps: IndexDeps, tally: _Tally
) -> None:
    """The file keeps the chunks of its last good version (if any); the error is recorded."""
    kept = (
        f" (its {old.chunks} chunks from the last good version are kept)"
        if (old is not None and old.chunks)
        else ""
    )
    tally.problems.append(Problem(f.path, message + kept))
    base = old or SourceFile(f.path, f.root, f.size, f.mtime_ns, "error")
    deps.store.save_source_files(
        [
            replace(
                base, root=f.root, size=f.size, mtime_ns=f.mtime_ns, status="error", error=message
            )
        ]
    )


def chunk_memories(
    f: FoundFile, text: FileText, params: ChunkParams, prepare: Callable[[NewMemory], Memory]
) -> list[Memory]:
    """A file's chunks as memories of type ``chunk``, dated by the file's name if it has one."""
    event_time = event_time_for(f.path)
    chunks = chunk_markdown(text.text, params)
    out = []
    for i, chunk in enumerate(chunks):
        content = chunk.content
        out.append(
            prepare(
                NewMemory(
                    content=content,
                    type="chunk",
                    event_time=event_time,
                    evergreen=event_time is None,
                    source=Source("file", f.path, chunk.line_start, chunk.line_end),
                    metadata={"headings": list(chunk.headings), "chunk": i, "chunks": len(chunks)},
                    id=chunk_id(f.path, i, content),
                )
            )
        )
    return out


def chunk_id(path: str, index: int, content: str) -> str:
    """A stable id: the same chunk of the same file always gets the same id."""
    key = f"{path}\0{index}\0{content}".encode()
    return "chunk-" + hashlib.sha256(key).hexdigest()[:24]


def _write_group(
    group: list[_Pending],
    deps: IndexDeps,
    tally: _Tally,
    fingerprint: str,
    advance: Callable[[int], None],
) -> None:
    """Embed the group's chunks together, then commit each file in its own transaction."""
    if not group:
        return
    contents = [m.content for item in group for m in item.memories]
    vectors = deps.embed(contents) if contents else None
    offset = 0
    for item in group:
        count = len(item.memories)
        rows = None if vectors is None or count == 0 else vectors[offset : offset + count]
        offset += count
        memories = [replace(m, embedding_fingerprint=fingerprint) for m in item.memories]
        deps.store.replace_file_chunks(item.record, memories, rows, item.text)
        tally.indexed.append(item.found.path)
        tally.chunks_added += count
        tally.chunks_removed += item.replaced
        advance(count)
