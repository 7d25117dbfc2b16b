"""The most a request may ask of recalld: every size that costs CPU or memory has a cap here,
declared in the request models' JSON schema (so in the OpenAPI document) and refused with a
clear message at every door (library, CLI, HTTP, MCP), which share those models.

The costly part of a request is the model: each memory's content (with its
``embed_context``) is embedded in windows of the model's width (256 tokens for the
packaged model, a window every 224 tokens), and a token is at least one character. So
:data:`MAX_EMBED_CHARS` characters to embed in one request bound its windows at
:data:`MAX_WINDOWS` for the packaged model (English text takes about a quarter of that).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, Field

MAX_ID_CHARS = 512
"""An id, project, scope, session or namespace: a name, a UUID or a path fits many times
over; megabyte ids would be copied into every index and filter."""
MAX_TAGS = 64
"""Tags on a memory, or tags a filter requires: a filter's tags become one SQL term each,
and SQLite refuses an expression deeper than 1,000."""
MAX_TAG_CHARS = 200
MAX_ENTITIES = 256
"""Entities given with a memory (each an index row)."""
MAX_ENTITY_CHARS = 200
MAX_TYPES = 16
"""Types a filter names (there are five; repeats are pointless)."""
MAX_METADATA_BYTES = 64 * 1024
"""A memory's metadata as JSON: returned with every hit, so a search of 1,000 hits carries
it 1,000 times."""
MAX_EMBED_CONTEXT_CHARS = 4000
"""Text embedded with a memory's content but never shown: a conversation's last turns fit."""
MAX_EMBED_CHARS = 1_000_000
"""Characters one request may send to the model (contents and ``embed_context`` of a batch,
or an import's content): about a minute of one core for English text."""
WINDOW_TOKENS = 224
"""How far the packaged model's windows advance (256 tokens, 32 shared)."""
MAX_WINDOWS = MAX_EMBED_CHARS // WINDOW_TOKENS + 1
"""The model windows a request costs at most with the packaged model (one per
:data:`WINDOW_TOKENS` characters at worst)."""
MAX_CONTEXT_TOKENS = 100_000
"""A context block's budget: larger than any model's prompt; a block is built by adding hits
until the budget is spent."""
MAX_IDS = 1000
"""Ids one forget names."""
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""The largest answer the HTTP server sends: 1,000 hits of full memories fit when the
memories are of ordinary size; a larger one is refused, asking for fewer hits."""


def _metadata_size(value: dict[str, Any]) -> dict[str, Any]:
    size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
    if size > MAX_METADATA_BYTES:
        raise ValueError(
            f"metadata is {size:,} bytes as JSON, over the limit of {MAX_METADATA_BYTES:,}"
        )
    return value


IdText = Annotated[str, Field(max_length=MAX_ID_CHARS)]
Tag = Annotated[str, Field(max_length=MAX_TAG_CHARS)]
Entity = Annotated[str, Field(max_length=MAX_ENTITY_CHARS)]
Tags = Annotated[tuple[Tag, ...], Field(max_length=MAX_TAGS)]
Entities = Annotated[tuple[Entity, ...], Field(max_length=MAX_ENTITIES)]
Metadata = Annotated[
    dict[str, Any],
    AfterValidator(_metadata_size),
    Field(json_schema_extra={"x-maxBytes": MAX_METADATA_BYTES}),
]
EmbedContext = Annotated[str, Field(max_length=MAX_EMBED_CONTEXT_CHARS)]


def embed_chars(contents: list[tuple[str, str | None]]) -> int:
    """Characters sent to the model for these (content, embed_context) pairs."""
    return sum(len(content) + len(context or "") for content, context in contents)


def check_embed_chars(total: int, what: str) -> None:
    """Refuse a request whose text to embed passes :data:`MAX_EMBED_CHARS`.

    Raises:
        ValueError: naming the total and the limit (pydantic turns it into a 422).
    """
    if total > MAX_EMBED_CHARS:
        raise ValueError(
            f"{what} hold {total:,} characters to embed, over the limit of "
            f"{MAX_EMBED_CHARS:,} a request: send them in smaller "
            "requests"
        )


def check_memory_sizes(item: Any) -> None:
    """The caps above on a memory given as a :class:`~recalld.records.NewMemory` (the
    library's ``add`` and ``add_many``, imports and indexing), in the words of the request
    models. Entities recalld extracts itself are not capped: only those a caller gives.

    Raises:
        InvalidInputError: naming the field and the limit.
    """
    from recalld.errors import InvalidInputError

    problems = [
        f"{name}: takes at most {MAX_ID_CHARS} characters"
        for name in ("id", "project", "scope", "session_id", "namespace")
        if isinstance(getattr(item, name), str) and len(getattr(item, name)) > MAX_ID_CHARS
    ]
    for name, most, longest in (
        ("tags", MAX_TAGS, MAX_TAG_CHARS),
        ("entities", MAX_ENTITIES, MAX_ENTITY_CHARS),
    ):
        values = getattr(item, name) or ()
        if len(values) > most:
            problems.append(f"{name}: takes at most {most} items")
        elif any(isinstance(v, str) and len(v) > longest for v in values):
            problems.append(f"{name}: takes at most {longest} characters")
    context = item.embed_context
    if isinstance(context, str) and len(context) > MAX_EMBED_CONTEXT_CHARS:
        problems.append(f"embed_context: takes at most {MAX_EMBED_CONTEXT_CHARS} characters")
    if isinstance(item.metadata, dict):
        try:
            _metadata_size(item.metadata)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise InvalidInputError("; ".join(problems))
