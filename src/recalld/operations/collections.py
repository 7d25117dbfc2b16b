"""Collections: naming indexed folders, their context lines, the files' texts (``get``),
and the collection each search hit comes from.

The rules (names, how context lines apply, how a path or glob names files) are
:mod:`recalld.sources.collections`'; this module reads and writes the store with them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace

from recalld.errors import InvalidInputError, NotFoundError, StoreError
from recalld.records import Collection, FileSet, Hit, InCollection, IndexedFile, SearchResult
from recalld.requests import MAX_FILES, GetFiles
from recalld.sources.collections import (
    Catalog,
    check_context,
    check_name,
    check_prefix,
    find_glob,
    find_one,
    is_glob,
)
from recalld.sources.discover import normalize_root
from recalld.stores.base import SourceFile, SourceIndex, Store

LINE_END_SLACK = 0.2
"""A cut text ends at the last line break of its last fifth, so a file is not cut
mid-line unless a line is longer than that."""


def _index(store: Store) -> SourceIndex | None:
    return store if isinstance(store, SourceIndex) else None


def naming_checks(
    store: Store, paths: Sequence[str], name: str | None, context: str | None
) -> tuple[list[str], str | None]:
    """The paths an ``index`` with ``name`` covers, checked before anything is written.

    ``name`` alone re-indexes that collection; with one path it names that folder (a name
    held by another folder is refused); ``context`` needs a name.
    """
    if name is None:
        if context is not None:
            raise InvalidInputError("a context line needs a collection name (--name)")
        return list(paths), None
    check_name(name)
    if context is not None:
        check_context(context)
    index = _index(store)
    catalog = Catalog.of(index) if index is not None else Catalog((), {})
    if not paths:
        return [catalog.named(name).path], name
    if len(paths) > 1:
        raise InvalidInputError("a collection is one folder: give one path with a name")
    path = normalize_root(paths[0])
    for root in catalog.roots:
        if root.name == name and root.path != path:
            raise InvalidInputError(
                f"collection {name!r} is already the folder {root.path}; choose another name "
                f"or remove it first (recalld collection remove {name})"
            )
    return [path], name


def list_collections(store: Store) -> list[Collection]:
    """The tenant's collections with their context lines and counts, by name."""
    index = _index(store)
    if index is None:
        return []
    catalog = Catalog.of(index)
    named = [r for r in catalog.roots if r.name]
    files = index.source_files([r.path for r in named]) if named else []
    out = []
    for root in sorted(named, key=lambda r: r.name or ""):
        mine = [f for f in files if f.root == root.path]
        out.append(
            Collection(
                name=root.name or "",
                path=root.path,
                globs=root.globs,
                contexts=dict(catalog.contexts.get(root.path, {})),
                files=len(mine),
                chunks=sum(f.chunks for f in mine),
                indexed_at=root.indexed_at,
            )
        )
    return out


def set_context(store: Store, name: str, text: str | None, path: str = "") -> Collection:
    """Set (``text`` None: remove) the context line of collection ``name`` or of a sub-path."""
    line = None if text is None else check_context(text)
    prefix = check_prefix(path)
    index = _require(store)
    root = Catalog.of(index).named(check_name(name))
    index.save_source_context(root.path, prefix, line)
    return next(c for c in list_collections(store) if c.name == name)


def remove_collection(store: Store, name: str) -> int:
    """Forget collection ``name``: its folder's files, chunks and lines; chunks deleted."""
    index = _require(store)
    root = Catalog.of(index).named(check_name(name))
    return index.remove_source_root(root.path)


def get_files(store: Store, request: GetFiles) -> FileSet:
    """The indexed files ``request.pattern`` names, with their texts within its budget.

    One path that names no indexed file is refused (:class:`NotFoundError`); a glob that
    matches nothing is an empty answer with a note.
    """
    pattern = request.pattern.strip()
    if not pattern:
        raise InvalidInputError("a path or glob must not be blank")
    index = _index(store)
    if index is None:
        raise NotFoundError("this store keeps no indexed files")
    catalog = Catalog.of(index)
    tracked = index.source_files()
    if not is_glob(pattern):
        chosen = [find_one(pattern, catalog, tracked)]
    else:
        chosen = find_glob(pattern, catalog, tracked)
    notes: list[str] = []
    if not chosen:
        notes.append(f"no indexed file matches {pattern} ({catalog.known()})")
    if len(chosen) > MAX_FILES:
        notes.append(
            f"{len(chosen)} files match; the first {MAX_FILES} by path are returned: "
            "narrow the pattern for the others"
        )
        chosen = chosen[:MAX_FILES]
    texts = index.source_texts([f.path for f in chosen])
    texts |= _recovered([f for f in chosen if f.path not in texts], index)
    files, budget = [], request.max_bytes
    for f in chosen:
        item = _indexed_file(f, texts.get(f.path), catalog, budget)
        budget -= len(item.text.encode("utf-8"))
        files.append(item)
    cut = sum(f.truncated for f in files)
    if cut:
        notes.append(
            f"{cut} file(s) cut to fit max_bytes={request.max_bytes}: ask for fewer files "
            "or a larger max_bytes"
        )
    return FileSet(pattern, tuple(files), tuple(notes))


def _recovered(files: Sequence[SourceFile], index: SourceIndex) -> dict[str, str]:
    """The texts of files indexed before texts were kept, read again from disk where the
    file is still exactly what was indexed (same SHA-256), and kept from now on."""
    from recalld.sources.reading import SourceReadError, read_text

    found: dict[str, str] = {}
    for f in files:
        try:
            text = read_text(f.path)
        except SourceReadError:
            continue
        if f.content_hash is not None and text.sha256 == f.content_hash:
            found[f.path] = text.text
    # A read-only store still answers; the text is then read again next time.
    with contextlib.suppress(StoreError):
        if found:
            index.save_source_texts(found)
    return found


def _indexed_file(f: SourceFile, text: str | None, catalog: Catalog, budget: int) -> IndexedFile:
    label = catalog.label(f.path)
    common = dict(
        path=catalog.display(f.path),
        source_path=f.path,
        collection=label,
        chunks=f.chunks,
        indexed_at=f.indexed_at,
    )
    if text is None:
        note = (
            "indexed before recalld kept the texts of files, and changed or gone since: run "
            "`recalld index --force` on its folder to keep its text"
        )
        return IndexedFile(text="", bytes=0, note=note, **common)  # type: ignore[arg-type]
    data = text.encode("utf-8")
    if len(data) <= budget:
        return IndexedFile(text=text, bytes=len(data), **common)  # type: ignore[arg-type]
    kept = _cut(data, max(budget, 0))
    note = f"cut at {len(kept.encode('utf-8')):,} of {len(data):,} bytes (max_bytes)"
    return IndexedFile(
        text=kept,
        bytes=len(data),
        truncated=True,
        note=note,
        **common,  # type: ignore[arg-type]
    )


def _cut(data: bytes, budget: int) -> str:
    """The first ``budget`` bytes as text, ending at a line break near the end if any."""
    head = data[:budget].decode("utf-8", errors="ignore")
    end = head.rfind("\n")
    if end >= len(head) * (1 - LINE_END_SLACK):
        return head[: end + 1]
    return head


def _require(store: Store) -> SourceIndex:
    index = _index(store)
    if index is None:
        raise InvalidInputError("this store's backend does not index files")
    return index


# -- hits ---------------------------------------------------------------------------------


def label_hits(store: Store, result: SearchResult) -> SearchResult:
    """``result`` with each hit of a collection's file carrying its collection and lines.

    The store is read only when a hit (or near miss) comes from an indexed file."""
    every = (*result.hits, *result.near_misses)
    if not any(h.memory.source.kind == "file" for h in every):
        return result
    index = _index(store)
    if index is None:
        return result
    catalog = Catalog.of(index)
    if not any(r.name for r in catalog.roots):
        return result
    return replace(
        result,
        hits=_labelled(result.hits, catalog),
        near_misses=_labelled(result.near_misses, catalog),
    )


def _labelled(hits: Sequence[Hit], catalog: Catalog) -> tuple[Hit, ...]:
    labels: dict[str, InCollection | None] = {}  # a file's chunks share one label
    out = []
    for hit in hits:
        source = hit.memory.source
        if source.kind == "file" and source.path:
            if source.path not in labels:
                labels[source.path] = catalog.label(source.path)
            hit = replace(hit, collection=labels[source.path])
        out.append(hit)
    return tuple(out)


def hits_catalog(store: Store, hits: Sequence[Hit]) -> Catalog | None:
    """The catalog the collections of ``hits`` are described from, read once; ``None``
    when no hit is from a collection (nothing is read then)."""
    index = _index(store)
    if index is None or all(h.collection is None for h in hits):
        return None
    return Catalog.of(index)


def collection_lines(catalog: Catalog, hits: Sequence[Hit]) -> list[str]:
    """The context block's lines about the collections of ``hits``: each context line once,
    after the collection or sub-path it belongs to (``- notes/work: Work notes``)."""
    labels = [h.collection for h in hits if h.collection is not None]
    if not labels:
        return []
    roots = {r.name: r.path for r in catalog.roots if r.name}
    seen: dict[str, None] = {}
    for label in dict.fromkeys(labels):  # each file once
        root = roots.get(label.name)
        for prefix, line in catalog.scoped(root, label.path) if root else []:
            where = f"{label.name}/{prefix}" if prefix else label.name
            seen.setdefault(f"- {where}: {line}", None)
    return list(seen)
