"""The MCP tools' parameters: each one's type, description and bounds, as the tool schemas
declare them to the calling model (the request objects check them again, with the
library's messages)."""

from __future__ import annotations

from typing import Annotated

from mcp.types import ToolAnnotations
from pydantic import Field

from recalld.records import TypeName
from recalld.request_limits import MAX_ID_CHARS, MAX_TAG_CHARS, MAX_TAGS
from recalld.requests import MAX_LIMIT, MAX_QUERY_CHARS, Filters, Moment

NAME = {"maxLength": MAX_ID_CHARS}
"""The bound of an id, project or session, as the request objects check it."""
TAGS = {"maxItems": MAX_TAGS, "items": {"type": "string", "maxLength": MAX_TAG_CHARS}}
"""The bounds of a memory's tags, as the request objects check them."""

Query = Annotated[
    str,
    Field(
        description="The question or keywords, in natural language (1-10,000 characters).",
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS},
    ),
]
AsOf = Annotated[
    Moment | None,
    Field(
        description="Reference time for relative dates ('last week') and recency: an ISO date "
        "or datetime; default now."
    ),
]
FiltersArg = Annotated[
    Filters | None,
    Field(
        description="Only memories matching all of these (project, scope, types, tags, "
        "session_id, since, until)."
    ),
]
Explain = Annotated[
    bool,
    Field(
        description="Also say why each memory ranked where it did (channels, fusion, adjustments)."
    ),
]
Id = Annotated[
    str, Field(description="A memory id, as returned by the other tools.", json_schema_extra=NAME)
]
Content = Annotated[str, Field(description="The memory: one self-contained statement.")]
Kind = Annotated[
    TypeName,
    Field(
        description="insight (a durable fact, decision or preference), event (something that "
        "happened), raw, turn (a line of a conversation) or chunk (a piece of a document); "
        "fact, preference, decision and lesson are stored as insight, episode as event, message "
        "as turn, document as chunk, log as raw.",
    ),
]
Tags = Annotated[
    list[str] | None,
    Field(description="Labels, e.g. ['deploy', 'billing'].", json_schema_extra=TAGS),
]
Project = Annotated[
    str | None,
    Field(
        description="The project it belongs to (a repository, a client); searches can filter "
        "or favour it.",
        json_schema_extra=NAME,
    ),
]
Session = Annotated[
    str | None,
    Field(description="The conversation or session it came from.", json_schema_extra=NAME),
]
When = Annotated[Moment | None, Field(description="When it happened: an ISO date or datetime.")]
Pinned = Annotated[bool, Field(description="Always rank it higher and never let it decay.")]


Limit = Annotated[
    int,
    Field(
        description="How many memories to return (1-1000).",
        json_schema_extra={"minimum": 1, "maximum": MAX_LIMIT},
    ),
]
"""The schema states the bounds the request object checks (with the library's message)."""
ListLimit = Annotated[
    int, Field(description="How many memories to list (1-1000).", ge=1, le=MAX_LIMIT)
]
"""Checked as the HTTP API's page is (the library's list has no upper bound)."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
CHANGES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
