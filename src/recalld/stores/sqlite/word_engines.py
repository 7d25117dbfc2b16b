"""The engines behind the SQLite store's word channel, in the order they are asked: the
word index beside a large store (when tantivy is installed), then FTS5, which always
answers. A new engine is a module with a :class:`~.readers.WordEngine` and a line here."""

from __future__ import annotations

from pathlib import Path

from recalld.stores.sqlite import word_index
from recalld.stores.sqlite.readers import FTS5, WordEngine


def word_engines(path: str) -> list[WordEngine]:
    """The word channel's engines for the store at ``path``, in the order they are asked."""
    engines: list[WordEngine] = []
    if path != ":memory:" and word_index.words_available():
        engines.append(word_index.TantivyWords(Path(path + ".words")))
    return [*engines, FTS5]
