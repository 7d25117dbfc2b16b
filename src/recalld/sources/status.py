"""The state of the indexed sources, for ``recalld status``: what is stale, pending, broken."""

from __future__ import annotations

from dataclasses import dataclass

from recalld.sources.discover import Problem, scan_root
from recalld.stores.base import SourceIndex


@dataclass(frozen=True)
class SourceStatus:
    """Indexed roots and files compared with the disk (``stat`` only, nothing is read)."""

    roots: tuple[str, ...]
    files: int
    """Files the index tracks."""
    indexed: int
    chunks: int
    pending: tuple[str, ...]
    """Files a run started on but did not finish (a killed or failed run)."""
    stale: tuple[str, ...]
    """Indexed files changed on disk since."""
    unindexed: tuple[str, ...]
    """Files the roots' globs match that the index does not know yet."""
    missing: tuple[str, ...]
    """Indexed files gone from disk (their chunks are still searchable)."""
    errors: tuple[Problem, ...]
    """Files that could not be indexed, and why."""
    missing_roots: tuple[str, ...] = ()
    collections: tuple[str, ...] = ()
    """The named collections' names (``recalld collection list`` has their lines)."""

    @property
    def needs_index(self) -> bool:
        """Whether ``recalld index`` has work to do."""
        return bool(self.pending or self.stale or self.unindexed or self.missing)

    @property
    def empty(self) -> bool:
        """Workspaces are registered but nothing from them is searchable."""
        return bool(self.roots) and self.chunks == 0


def source_status(store: SourceIndex) -> SourceStatus | None:
    """Compare the index with the disk; None when no workspace was ever indexed."""
    roots = store.source_roots()
    files = store.source_files()
    if not roots and not files:
        return None
    tracked = {f.path: f for f in files}
    stale: list[str] = []
    unindexed: list[str] = []
    seen: set[str] = set()
    missing_roots: list[str] = []
    for root in roots:
        scan = scan_root(root.path, root.globs)
        if scan.missing:
            missing_roots.append(root.path)
        for found in scan.files:
            seen.add(found.path)
            old = tracked.get(found.path)
            if old is None:
                unindexed.append(found.path)
            elif old.status == "indexed" and (old.size, old.mtime_ns) != (
                found.size,
                found.mtime_ns,
            ):
                stale.append(found.path)
    skip = set(missing_roots)
    return SourceStatus(
        roots=tuple(r.path for r in roots),
        files=len(files),
        indexed=sum(f.status == "indexed" for f in files),
        chunks=sum(f.chunks for f in files),
        pending=tuple(f.path for f in files if f.status == "pending"),
        stale=tuple(stale),
        unindexed=tuple(sorted(set(unindexed))),
        missing=tuple(f.path for f in files if f.path not in seen and f.root not in skip),
        errors=tuple(Problem(f.path, f.error or "") for f in files if f.status == "error"),
        missing_roots=tuple(missing_roots),
        collections=tuple(sorted(r.name for r in roots if r.name)),
    )
