"""The facade's file methods: indexing folders into named collections, watching them,
importing files, and reading indexed files back (``get``). :class:`~recalld.engine.MemoryEngine`
inherits them; they are apart only to keep each module short."""

from __future__ import annotations

import builtins
import functools
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

from recalld.operations import collections as named, files
from recalld.operations.writing import Progress, Writer
from recalld.records import AddResult, Collection, FileSet, NewMemory
from recalld.requests import DEFAULT_FILE_BYTES, GetFiles, ImportRequest, parse
from recalld.stores.base import Store

if TYPE_CHECKING:
    import threading

    from recalld.sources.importer import ImportReport
    from recalld.sources.indexer import IndexDeps, IndexProgress, IndexReport


_Method = TypeVar("_Method", bound=Callable[..., Any])


def whole_store(method: _Method) -> _Method:
    """Run ``method`` only on a store that is not a partial copy (see
    :meth:`MemoryEngine.check_whole`)."""

    @functools.wraps(method)
    def call(self: FileMethods, *args: Any, **kwargs: Any) -> Any:
        self.check_whole()
        return method(self, *args, **kwargs)

    return cast(_Method, call)


_whole_store = whole_store


class FileMethods:
    """Folders, collections and files (mixed into :class:`~recalld.engine.MemoryEngine`)."""

    store: Store

    if TYPE_CHECKING:  # given by MemoryEngine

        def check_whole(self) -> None: ...

        def _writer(self) -> Writer: ...

        def _check_new(self, item: NewMemory) -> None: ...

        def add_many(
            self,
            items: Iterable[NewMemory | str],
            *,
            dedupe: bool = True,
            progress: Progress | None = None,
        ) -> builtins.list[AddResult]: ...

    @_whole_store
    def index(
        self,
        paths: Sequence[str | os.PathLike[str]] = (),
        *,
        globs: Sequence[str] | None = None,
        force: bool = False,
        max_file_bytes: int | None = None,
        allow_empty: bool = False,
        follow_symlinks: bool = False,
        progress: IndexProgress | None = None,
        name: str | None = None,
        context: str | None = None,
    ) -> IndexReport:
        """Index markdown memory files incrementally; see :mod:`recalld.sources.indexer`.

        Args:
            paths: folders (a memory workspace) or files; none re-indexes every known root
                (or, with ``name`` alone, that collection's folder).
            globs: files to pick under each folder (default ``MEMORY.md``, ``memory/**/*.md``).
            force: re-chunk and re-embed every file, changed or not.
            max_file_bytes: larger files are skipped and reported (default 5 MB).
            allow_empty: accept folders that match no file yet.
            follow_symlinks: follow symbolic links that resolve outside the workspace (by
                default they are skipped and reported in ``problems``).
            progress: called with (chunks done, chunks to embed), from before the first.
            name: make the one folder given a named collection (or re-index the collection
                of that name); its files are then ``NAME/PATH`` and its hits carry it.
            context: the collection's context line, returned beside its hits (needs
                ``name``; see :meth:`set_context` for sub-paths).

        Raises:
            InvalidInputError: a path does not exist, a glob is invalid, nothing matched, or
                the name is taken by another folder.
            EmbedderMismatchError: the store's vectors come from another embedder.
        """
        names = [os.fspath(p) for p in paths]
        chosen, name = named.naming_checks(self.store, names, name, context)
        options = files.index_options(globs, force, max_file_bytes, allow_empty, follow_symlinks)
        options = replace(options, name=name)
        report = files.index(chosen, options, self._index_deps(), progress)
        if name is not None and context is not None:
            named.set_context(self.store, name, context)
        return report

    def _index_deps(self) -> IndexDeps:
        return files.index_deps(self._writer())

    @_whole_store
    def watch(
        self,
        paths: Sequence[str | os.PathLike[str]] = (),
        *,
        globs: Sequence[str] | None = None,
        interval: float | None = None,
        debounce: float | None = None,
        max_seconds: float | None = None,
        on_report: Callable[[IndexReport], None] | None = None,
        stop: threading.Event | None = None,
    ) -> int:
        """Index ``paths``, then re-index each settled change; returns the number of runs.

        Runs until ``stop`` is set, ``max_seconds`` pass, or KeyboardInterrupt (which
        propagates; every finished file stays indexed). Arguments are as for :meth:`index`.
        """

        def run(names: builtins.list[str], pattern: tuple[str, ...] | None) -> IndexReport:
            return self.index(names, globs=pattern, allow_empty=True)

        timing = (interval, debounce, max_seconds)
        return files.watch(self.store, paths, globs, run, timing, on_report, stop)

    @_whole_store
    def run_import(
        self, request: ImportRequest, *, progress: Callable[[int, int], None] | None = None
    ) -> ImportReport:
        """Import a file in any format (:data:`~recalld.requests.IMPORT_FORMATS`).

        Every format has one policy for bad lines (:func:`~recalld.sources.importer.
        check_problems`): each is reported in ``problems`` with its number and why, and
        skipped; with ``strict`` any bad line refuses the whole input, storing nothing.
        ``memories`` (JSONL, one memory object a line) are stored with deduplication
        (``turns`` counts the memories read, ``already_present`` the duplicates).
        Transcripts: see :meth:`import_transcript`. ``progress`` is called with (done,
        total).
        """
        request = parse(ImportRequest, request)
        return files.run_import(request, self._check_new, self.add_many, progress)

    def import_transcript(
        self,
        source: str | os.PathLike[str] | BinaryIO,
        fmt: str,
        *,
        progress: Callable[[int, int], None] | None = None,
        strict: bool = False,
    ) -> ImportReport:
        """Import a conversation transcript turn by turn; re-importing adds nothing.

        Args:
            source: a file (``.gz`` is decompressed) or a binary stream.
            fmt: ``jsonl-transcript``, ``claude-code``, ``longmemeval`` or ``locomo``
                (see :mod:`recalld.sources.transcripts` and :mod:`recalld.sources.datasets`).
            progress: called with (turns embedded or found stored, turns to store) as the
                work advances.
            strict: refuse the whole transcript when any line is bad (default: skip them).
        """
        return files.import_transcript(
            source, fmt, self._check_new, self.add_many, progress, strict
        )

    # -- collections and their files ------------------------------------------------------

    @_whole_store
    def collections(self) -> builtins.list[Collection]:
        """The tenant's named collections (``index(..., name=...)``), by name, with their
        context lines and how many files and chunks each holds."""
        return named.list_collections(self.store)

    @_whole_store
    def set_context(self, name: str, text: str | None, *, path: str = "") -> Collection:
        """Set the context line of collection ``name``, or of the sub-path ``path`` inside
        it (``text=None`` removes it). A hit gets every line whose sub-path holds its file,
        the collection's own first, outermost to innermost.

        Raises:
            NotFoundError: no collection has that name.
            InvalidInputError: the line is blank, on several lines or over 300 characters.
        """
        return named.set_context(self.store, name, text, path)

    @_whole_store
    def remove_collection(self, name: str) -> int:
        """Forget collection ``name``: its folder's indexed files, their chunks and the
        collection's context lines (the files on disk are not touched); returns the chunks
        deleted.

        Raises:
            NotFoundError: no collection has that name.
        """
        return named.remove_collection(self.store, name)

    def get_files(self, pattern: str, *, max_bytes: int = DEFAULT_FILE_BYTES) -> FileSet:
        """Indexed files by path or glob, each with its text, collection and context lines
        (keyword form of :meth:`run_get_files`).

        Args:
            pattern: ``NAME/PATH`` (a file of a collection), a path inside one collection,
                an absolute path, or a glob of these (``notes/**/*.md``).
            max_bytes: the text returned over all files (UTF-8 bytes); a file that does not
                fit is cut and its ``note`` says so.

        Raises:
            NotFoundError: one path (not a glob) that names no indexed file of this tenant;
                a glob that matches nothing answers an empty set with a note instead.
        """
        request = parse(GetFiles, {"pattern": pattern, "max_bytes": max_bytes})
        return self.run_get_files(request)

    @_whole_store
    def run_get_files(self, request: GetFiles) -> FileSet:
        """The indexed files ``request`` names (see :meth:`get_files`)."""
        return named.get_files(self.store, parse(GetFiles, request))
