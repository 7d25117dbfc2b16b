"""Files: markdown workspaces indexed and watched, memories and transcripts imported.

The work itself lives in :mod:`recalld.sources`; this module wires it to a store and a
:class:`~recalld.operations.writing.Writer`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, BinaryIO

from recalld.errors import InvalidInputError, StoreError
from recalld.providers.embedders import Vectors
from recalld.records import AddResult, NewMemory
from recalld.requests import ImportRequest
from recalld.stores.base import SourceIndex, Store

if TYPE_CHECKING:
    import threading

    from recalld.operations.writing import Writer
    from recalld.sources.importer import ImportReport
    from recalld.sources.indexer import IndexDeps, IndexOptions, IndexProgress, IndexReport

AddMany = Callable[..., list[AddResult]]
"""The engine's ``add_many`` (a whole-store check, then :func:`writing.add_many`)."""
Steps = Callable[[int, int], None]
"""A progress callback: (done, total)."""


def source_index(store: Store) -> SourceIndex:
    """``store`` as a file index, or a clear refusal when its backend cannot index files."""
    if not isinstance(store, SourceIndex):
        raise StoreError("this store's backend does not index files (yet)")
    return store


def index_deps(writer: Writer) -> IndexDeps:
    """What the indexer needs of the engine: the store, embedding, checking, the clock."""
    from recalld.sources.indexer import IndexDeps

    def embed(texts: Sequence[str]) -> Vectors:
        return writer.cached(writer.embedder()).embed_documents(texts).vectors

    return IndexDeps(
        store=source_index(writer.store),
        embed=embed,
        fingerprint=lambda: writer.embedder().fingerprint.to_json(),
        prepare=lambda item: writer.prepare(item, writer.clock()),
        clock=writer.clock,
    )


def index_options(
    globs: Sequence[str] | None,
    force: bool,
    max_file_bytes: int | None,
    allow_empty: bool,
    follow_symlinks: bool,
) -> IndexOptions:
    """The indexer's options from :meth:`MemoryEngine.index`'s arguments."""
    from recalld.sources.indexer import IndexOptions
    from recalld.sources.reading import MAX_FILE_BYTES

    return IndexOptions(
        globs=None if globs is None else tuple(globs),
        force=force,
        max_file_bytes=max_file_bytes or MAX_FILE_BYTES,
        allow_empty=allow_empty,
        follow_symlinks=follow_symlinks,
    )


def index(
    paths: Sequence[str | os.PathLike[str]],
    options: IndexOptions,
    deps: IndexDeps,
    progress: IndexProgress | None,
) -> IndexReport:
    """See :meth:`MemoryEngine.index`."""
    from recalld.sources.indexer import index_sources

    return index_sources([os.fspath(p) for p in paths], options, deps, progress)


def watch(
    store: Store,
    paths: Sequence[str | os.PathLike[str]],
    globs: Sequence[str] | None,
    reindex: Callable[[list[str], tuple[str, ...] | None], IndexReport],
    timing: tuple[float | None, float | None, float | None],
    on_report: Callable[[IndexReport], None] | None,
    stop: threading.Event | None,
) -> int:
    """See :meth:`MemoryEngine.watch`; ``reindex`` indexes the named roots once and
    ``timing`` is (interval, debounce, max_seconds)."""
    from recalld.sources import watch as watching
    from recalld.sources.indexer import resolve_roots

    names = [os.fspath(p) for p in paths]
    pattern = None if globs is None else tuple(globs)
    roots = resolve_roots(names, pattern, source_index(store))
    interval, debounce, max_seconds = timing
    options = watching.WatchOptions(
        interval=interval or watching.POLL_SECONDS,
        debounce=watching.DEBOUNCE_SECONDS if debounce is None else debounce,
        max_seconds=max_seconds,
    )
    return watching.watch(
        lambda: reindex(names, pattern),
        lambda: watching.snapshot(roots),
        on_report or (lambda report: None),
        options,
        stop,
    )


def run_import(
    request: ImportRequest,
    check_new: Callable[[NewMemory], None],
    add_many: AddMany,
    progress: Steps | None,
) -> ImportReport:
    """See :meth:`MemoryEngine.run_import`."""
    from recalld.io import read_numbered_memories
    from recalld.sources.importer import ImportReport, check_problems, read_source

    source: str | BinaryIO = (
        request.path if request.path is not None else io.BytesIO(request.content or b"")
    )
    if request.format != "memories":
        return import_transcript(
            source, request.format, check_new, add_many, progress, request.strict
        )
    data, _, _ = read_source(source)
    numbered, problems = read_numbered_memories(data.splitlines(keepends=True))
    items: list[NewMemory] = []
    for number, item in numbered:
        try:
            check_new(item)
        except InvalidInputError as exc:
            problems.append(f"line {number}: {exc}")
            continue
        items.append(item)
    problems.sort(key=_line_number)
    check_problems(problems, len(items), "memories", request.strict)
    results = add_many(items, progress=_counting(progress, len(items)))
    created = sum(r.created for r in results)
    duplicates = len(results) - created
    return ImportReport("memories", len(items), created, duplicates, 0, 0, tuple(problems))


def import_transcript(
    source: str | os.PathLike[str] | BinaryIO,
    fmt: str,
    check_new: Callable[[NewMemory], None],
    add_many: AddMany,
    progress: Steps | None,
    strict: bool,
) -> ImportReport:
    """See :meth:`MemoryEngine.import_transcript`."""
    from recalld.sources.importer import ImportDeps, import_transcript as import_turns

    def add_turns(items: Sequence[NewMemory]) -> list[AddResult]:
        # Turns are not deduplicated: the same words said twice are two turns.
        return add_many(items, dedupe=False, progress=_counting(progress, len(items)))

    deps = ImportDeps(validate=check_new, add_many=add_turns)
    return import_turns(source, fmt, deps, strict=strict)


def _line_number(problem: str) -> int:
    """Problems in file order: "line 12: ..." sorts by 12 (others first)."""
    head = problem.split(":", 1)[0]
    return int(head[5:]) if head.startswith("line ") and head[5:].isdigit() else 0


def _counting(progress: Steps | None, total: int) -> Callable[[int], None]:
    """A step callback that reports (done so far, ``total``) to ``progress``."""
    done = 0

    def advance(step: int) -> None:
        nonlocal done
        done += step
        if progress is not None:
            progress(done, total)

    return advance
