"""Requests about indexed files: ``get`` by path or glob (:meth:`MemoryEngine.run_get_files`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from recalld.request_limits import MAX_ID_CHARS
from recalld.requests.base import FORBID

DEFAULT_FILE_BYTES = 64 * 1024
"""The text one ``get`` returns by default, over all its files: about 16,000 tokens, a few
pages, what one turn of an agent can read."""
MAX_FILE_BYTES = 8 * 1024 * 1024
"""The most one ``get`` may ask for (under the HTTP answers' cap)."""
MAX_FILES = 200
"""Files one ``get`` returns at most; a glob matching more says so and how many."""


class GetFiles(BaseModel):
    """Indexed files by path or glob, with their text, collection and context lines."""

    model_config = FORBID

    pattern: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    """``NAME/PATH`` (a file of a collection), a path inside one collection, an absolute
    path, or a glob of any of these (``notes/**/*.md``: ``**`` spans folders)."""
    max_bytes: int = Field(default=DEFAULT_FILE_BYTES, ge=1, le=MAX_FILE_BYTES)
    """The text returned over all files, in UTF-8 bytes; a file that does not fit is cut
    (at a line end when one is near) and said to be."""
