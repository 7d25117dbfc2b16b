"""Named collections of indexed folders: their names, context lines, and where a file sits.

A collection is an indexed root given a name (``recalld index PATH --name NAME``). Its
files are named ``NAME/PATH`` (the path inside the folder). Context lines describe the
collection and sub-paths of it; they apply the way folders nest: a file gets every line
whose sub-path holds it, the collection's own line first, then outermost to innermost (an
agent reads "Work documentation" and then "API reference" for ``docs/api/auth.md``).

A file under the folders of two collections belongs, for its name and lines, to the
deeper one. Everything here reads the store once (:meth:`Catalog.of`) and then works on
plain values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from recalld.errors import InvalidInputError, NotFoundError
from recalld.records import InCollection
from recalld.requests import MAX_CONTEXT_CHARS
from recalld.sources.discover import glob_regex, normalize_root
from recalld.stores.base import SourceFile, SourceIndex, SourceRoot

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A collection name: a word a shell and a URL take as is, never a ``/`` (which separates
the name from the path in ``NAME/PATH``)."""
GLOB_CHARS = frozenset("*?[")
"""A target holding any of these is a glob (several files), else one path."""


def check_name(name: str) -> str:
    """``name`` if it can name a collection, else a clear refusal."""
    if not NAME.fullmatch(name):
        raise InvalidInputError(
            f"collection name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_context(text: str) -> str:
    """A context line, stripped; refused when blank, on several lines, or too long."""
    line = text.strip()
    if not line:
        raise InvalidInputError("a context line must not be blank")
    if "\n" in line or "\r" in line:
        raise InvalidInputError("a context line is one line: it must not hold a line break")
    if len(line) > MAX_CONTEXT_CHARS:
        raise InvalidInputError(
            f"a context line is at most {MAX_CONTEXT_CHARS} characters (got {len(line)})"
        )
    return line


def check_prefix(prefix: str) -> str:
    """A sub-path of a collection as stored: ``/``-separated, no slashes at its ends."""
    parts = [p for p in prefix.replace("\\", "/").split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts) or GLOB_CHARS & set(prefix):
        raise InvalidInputError(
            f"sub-path {prefix!r}: give a folder or file inside the collection, without "
            "'..' or glob characters"
        )
    return "/".join(parts)


def is_glob(target: str) -> bool:
    """Whether ``target`` names files by a pattern."""
    return bool(GLOB_CHARS & set(target))


def relative(root: str, path: str) -> str:
    """``path`` inside ``root``, ``/``-separated (a file root: the file's own name)."""
    if path == root:
        return os.path.basename(path)
    # Both are normalised absolute paths and ``root`` holds ``path``: a slice is enough.
    return path[len(root.rstrip(os.sep)) + 1 :].replace(os.sep, "/")


def holds(root: str, path: str) -> bool:
    """Whether ``path`` is ``root`` or lies under it."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class Catalog:
    """The tenant's roots and context lines, read once."""

    roots: tuple[SourceRoot, ...]
    contexts: Mapping[str, Mapping[str, str]]
    """Context lines by root, then by prefix (``""``: the collection's own)."""

    @classmethod
    def of(cls, store: SourceIndex) -> Catalog:
        """The catalog of ``store``'s tenant."""
        lines: dict[str, dict[str, str]] = {}
        for c in store.source_contexts():
            lines.setdefault(c.root, {})[c.prefix] = c.text
        return cls(tuple(store.source_roots()), lines)

    @property
    def names(self) -> list[str]:
        """The collections' names, sorted."""
        return sorted(r.name for r in self.roots if r.name)

    def named(self, name: str) -> SourceRoot:
        """The collection called ``name``, or a refusal naming those that exist."""
        for root in self.roots:
            if root.name == name:
                return root
        raise NotFoundError(f"no collection named {name!r} ({self.known()})")

    def known(self) -> str:
        """The collections there are, for a message."""
        names = self.names
        return "collections: " + ", ".join(names) if names else "no collection yet"

    def root_of(self, path: str, named_only: bool = False) -> SourceRoot | None:
        """The deepest root holding ``path`` (of the named ones only, when asked)."""
        found = [r for r in self.roots if holds(r.path, path) and (r.name or not named_only)]
        return max(found, key=lambda r: len(r.path), default=None)

    def label(self, path: str) -> InCollection | None:
        """The collection ``path`` belongs to, its path there and the lines that apply."""
        root = self.root_of(path, named_only=True)
        if root is None or root.name is None:
            return None
        inside = relative(root.path, path)
        return InCollection(root.name, inside, self.lines(root.path, inside))

    def lines(self, root: str, inside: str) -> tuple[str, ...]:
        """Every context line of ``root`` whose sub-path holds ``inside``, outermost first."""
        return tuple(line for _, line in self.scoped(root, inside))

    def scoped(self, root: str, inside: str) -> list[tuple[str, str]]:
        """(sub-path, line) of every context line of ``root`` that applies to ``inside``."""
        own = self.contexts.get(root, {})
        applying = [p for p in own if p == "" or inside == p or inside.startswith(p + "/")]
        applying.sort(key=lambda p: (p != "", p.count("/"), p))
        return [(p, own[p]) for p in applying]

    def display(self, path: str) -> str:
        """``NAME/PATH`` for a file of a collection, else its absolute path."""
        found = self.label(path)
        return f"{found.name}/{found.path}" if found else path


def find_one(target: str, catalog: Catalog, files: Sequence[SourceFile]) -> SourceFile:
    """The indexed file ``target`` names: ``NAME/PATH``, a path inside one collection, or
    an absolute path; a clear refusal otherwise."""
    tracked = {f.path: f for f in files}
    if target.startswith(("/", "~")) or os.path.isabs(target):
        path = normalize_root(target)
        if path in tracked:
            return tracked[path]
        if catalog.root_of(path) is None:
            raise NotFoundError(f"{target}: not in any indexed folder ({catalog.known()})")
        raise NotFoundError(f"{target}: not an indexed file (it is not, or no longer, indexed)")
    inside = check_prefix(target)
    head, _, rest = inside.partition("/")
    if rest and head in catalog.names:
        path = _inside(catalog.named(head).path, rest, tracked)
        if path in tracked:
            return tracked[path]
        raise NotFoundError(f"{target}: collection {head!r} has no indexed file {rest!r}")
    found = {_inside(r.path, inside, tracked) for r in catalog.roots} & set(tracked)
    if len(found) == 1:
        return tracked[found.pop()]
    if found:
        names = ", ".join(sorted(catalog.display(p) for p in found))
        raise InvalidInputError(f"{target} is in several collections: name one ({names})")
    raise NotFoundError(
        f"{target}: not an indexed file of any collection; give NAME/PATH or an absolute "
        f"path ({catalog.known()})"
    )


def _inside(root: str, inside: str, tracked: Mapping[str, SourceFile]) -> str:
    """The absolute path of ``inside`` in ``root`` (a root that is a file holds itself)."""
    if root in tracked:
        return root if inside == os.path.basename(root) else ""
    return os.path.join(root, *inside.split("/"))


def find_glob(pattern: str, catalog: Catalog, files: Sequence[SourceFile]) -> list[SourceFile]:
    """The indexed files ``pattern`` matches, by path: an absolute glob matches absolute
    paths; another matches a file's ``NAME/PATH`` or its path inside its folder."""
    absolute = pattern.startswith(("/", "~"))
    regex = _compiled(os.path.expanduser(pattern) if absolute else pattern.strip("/"))
    if absolute:
        return [f for f in files if regex.fullmatch(f.path)]
    out = []
    for f in files:
        root = catalog.root_of(f.path)
        names = {catalog.display(f.path)}
        if root is not None:
            names.add(relative(root.path, f.path))
        if any(regex.fullmatch(n) for n in names):
            out.append(f)
    return out


def _compiled(pattern: str) -> re.Pattern[str]:
    """The glob as a regex, or a clear refusal (a range such as ``[z-a]``)."""
    try:
        return glob_regex(pattern)
    except re.error as exc:
        raise InvalidInputError(f"glob {pattern!r} is not valid: {exc}") from None
