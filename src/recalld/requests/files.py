"""Requests about indexed files: ``get`` by path or glob (:meth:`MemoryEngine.run_get_files`)."""

from __future__ import annotations

from pydantic import Field

from recalld.request_limits import MAX_ID_CHARS
from recalld.requests.base import RequestModel

DEFAULT_FILE_BYTES = 64 * 1024
"""The text one ``get`` returns by default, over all its files: about 16,000 tokens, a few
pages, what one turn of an agent can read."""
MAX_FILE_BYTES = 8 * 1024 * 1024
"""The most one ``get`` may ask for (under the HTTP answers' cap)."""
MAX_CONTEXT_CHARS = 300
"""A context line rides along with every hit of its files, so a paragraph would crowd the
hits out of an agent's budget: one short line."""
MAX_FILES = 200
"""Files one ``get`` returns at most; a glob matching more says so and how many."""


class GetFiles(RequestModel):
    """Indexed files by path or glob, with their text, collection and context lines."""

    pattern: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    """``NAME/PATH`` (a file of a collection), a path inside one collection, an absolute
    path, or a glob of any of these (``notes/**/*.md``: ``**`` spans folders)."""
    max_bytes: int = Field(default=DEFAULT_FILE_BYTES, ge=1, le=MAX_FILE_BYTES)
    """The text returned over all files, in UTF-8 bytes; a file that does not fit is cut
    (at a line end when one is near) and said to be."""


class SetContext(RequestModel):
    """A collection's context line, or a sub-path's (:meth:`MemoryEngine.set_context`)."""

    text: str | None = Field(max_length=MAX_CONTEXT_CHARS)
    """The line (one short line); ``null`` removes it."""
    path: str = Field(default="", max_length=MAX_ID_CHARS)
    """A sub-path inside the collection; empty for the collection's own line."""
