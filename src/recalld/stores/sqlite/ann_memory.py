"""A saved ANN index's bytes in memory backed by huge pages, for the mapped (read-only) index.

Why: a search of a large store walks the HNSW graph from node to node at random across the
whole file (530 MB at 1M vectors), and with 4 KB pages nearly every step misses the
processor's address cache (TLB) as well as its data caches. A file mapping cannot use huge
pages on most systems (Linux maps a regular file's pages 4 KB at a time), so the file is
read once into anonymous memory advised for transparent huge pages (``MADV_HUGEPAGE``, 2 MB
pages on x86-64) and usearch views that buffer instead of the file. Measured on the 1M scale
store (docs/design/search-cpu.md, "The graph walk at 1M"): a walk of beam 2,048 cost 11.6
against 13.9 ms of thread CPU in a search (the same keys, in the same order).

The cost: the process holds its own copy of the file (the page cache's copy is shared by
every process that maps it), and reading it takes 0.3 s at 1M from the page cache, 2-3 s
from the disk. So a file is copied only after the process has walked its graph
:data:`WALKS_BEFORE_COPY` times (a one-shot command never reads it all), in a background
thread (the searches meanwhile walk the mapped file; the view is swapped once the copy is
whole), within :data:`MIN_BYTES` .. :data:`MAX_BYTES`, while the system has
:data:`SPARE_FACTOR` times its size available, and only where the kernel takes the advice
(Linux with transparent huge pages not ``never``); otherwise the file stays mapped. An index
that changes is loaded by usearch into its own memory, which this does not affect.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("recalld")

MIN_BYTES = 32 << 20
"""Smaller files gain too little: at 100k vectors (53 MB) a walk cost about a tenth less; a
few MB are covered by the TLB's 4 KB entries already."""
MAX_BYTES = 8 << 30
"""A larger file stays mapped: a private copy of it per process is more memory than the walk
is worth."""
SPARE_FACTOR = 4
"""The copy is made only while the system's available memory is this many times the file."""
WALKS_BEFORE_COPY = 4
"""Walks of a mapped index after which its file is copied (a server, a benchmark), so that a
process that searches once or twice (a command line) does not read 530 MB at 1M for it."""
HUGE_PAGE = 2 << 20
"""The buffer is a whole number of huge pages (2 MB on x86-64 and most arm64 kernels)."""
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@dataclass(frozen=True)
class SavedFile:
    """A saved index file as it was when it was mapped: a copy is made only of that file
    (not of one saved under the same name since by another process)."""

    path: Path
    stamp: tuple[int, int, int, int]
    """Its device, inode, size and modification time (ns)."""

    @classmethod
    def of(cls, path: Path) -> SavedFile | None:
        try:
            return cls(path, _stamp(os.stat(path)))
        except OSError:
            return None


def _stamp(stat: os.stat_result) -> tuple[int, int, int, int]:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


class HugeCopy:
    """A file's bytes in anonymous memory advised for huge pages; :attr:`view` is what an
    index views. Keep this object as long as anything views it."""

    def __init__(self, memory: mmap.mmap, size: int) -> None:
        self._memory = memory
        self.view = memoryview(memory)[:size]

    def __len__(self) -> int:
        return len(self.view)

    def advised(self) -> bool:
        """Whether the kernel holds the copy's memory as advised for huge pages."""
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._memory))
        return advised_huge(address)


def huge_copy(saved: SavedFile) -> HugeCopy | None:
    """The ``saved`` file read into memory advised for huge pages, or None when it should
    stay mapped (see the module's docstring), cannot be read or is not that file any more."""
    path, size = saved.path, saved.stamp[2]
    if not MIN_BYTES <= size <= MAX_BYTES or not _huge_pages_advisable():
        return None
    if _available_bytes() < SPARE_FACTOR * size:
        return None
    length = -(-size // HUGE_PAGE) * HUGE_PAGE
    try:
        memory = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError, AttributeError):
        return None
    try:
        memory.madvise(mmap.MADV_HUGEPAGE)  # before the pages are touched
        copy = HugeCopy(memory, size)
        with path.open("rb") as file:
            if _stamp(os.fstat(file.fileno())) != saved.stamp:
                raise OSError(f"{path} was saved again since it was mapped")
            if file.readinto(copy.view) != size:
                raise OSError(f"{path} changed while it was read")
    except (OSError, ValueError) as exc:
        log.info("the ANN index stays mapped from its file: %s", exc)
        return None
    return copy


def copy_in_background(saved: SavedFile, use: Callable[[HugeCopy], None]) -> threading.Thread:
    """Start a daemon thread that makes :func:`huge_copy` of ``saved`` and hands it to
    ``use`` (not called when no copy is made)."""

    def run() -> None:
        try:
            copy = huge_copy(saved)
            if copy is not None:
                use(copy)
        except Exception as exc:  # a failed copy only leaves the mapped file in use
            log.warning("the ANN index stays mapped from its file: %s", exc)

    thread = threading.Thread(target=run, name="recalld-ann-huge-pages", daemon=True)
    thread.start()
    return thread


def _huge_pages_advisable() -> bool:
    """Whether this kernel takes ``MADV_HUGEPAGE`` (Linux, transparent huge pages not off)."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        setting = THP_SETTING.read_text()
    except OSError:
        return False
    return "[never]" not in setting


def _available_bytes() -> int:
    """Memory the system can give without swapping (``MemAvailable``), else 0."""
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def advised_huge(address: int) -> bool:
    """Whether the mapping holding ``address`` is advised for huge pages (its ``VmFlags``
    in ``/proc/self/smaps`` say ``hg``); False where that cannot be read."""
    try:
        with open("/proc/self/smaps", encoding="ascii", errors="replace") as smaps:
            inside = False
            for line in smaps:
                head = line.split(" ", 1)[0]
                if "-" in head and ":" not in head:
                    start, end = (int(part, 16) for part in head.split("-"))
                    inside = start <= address < end
                elif inside and line.startswith("VmFlags:"):
                    return "hg" in line.split()[1:]
    except (OSError, ValueError):
        pass
    return False
