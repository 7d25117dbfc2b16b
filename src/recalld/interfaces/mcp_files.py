"""The MCP tool for indexed files: ``memory_get_files``, a file of a collection (or every
file a glob matches) with its text, collection and context lines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

import recalld
from recalld.interfaces.mcp_answers import MAX_OUTPUT_CHARS, result
from recalld.interfaces.mcp_args import NAME
from recalld.requests import GetFiles, parse

MCP_FILE_BYTES = 20_000
"""The text a ``memory_get_files`` answer holds by default: the text is sent twice (as text
and in the structured content), so this leaves room within the tool-output limit."""
MCP_MAX_FILE_BYTES = MAX_OUTPUT_CHARS // 2 - 2_000
"""The most text one answer may ask for (twice that, plus the labels, stays within
``MAX_OUTPUT_CHARS``)."""

Pattern = Annotated[
    str,
    Field(
        description="An indexed file: NAME/PATH (a file of collection NAME), a path inside "
        "one collection, an absolute path, or a glob of these ('notes/**/*.md'; ** spans "
        "folders). Paths appear in search results as 'from NAME/PATH'.",
        json_schema_extra={"minLength": 1, **NAME},
    ),
]
MaxBytes = Annotated[
    int,
    Field(
        description="The text returned over all files, in bytes; a file that does not fit "
        "is cut and says so.",
        ge=1,
        le=MCP_MAX_FILE_BYTES,
    ),
]


def describe_files(found: recalld.FileSet) -> str:
    """Each file under its ``NAME/PATH`` and context lines, then its text; notes last."""
    lines: list[str] = []
    for file in found.files:
        lines.append(f"== {file.path}")
        if file.collection is not None:
            lines += [f"   context: {line}" for line in file.collection.context]
        if file.note:
            lines.append(f"   ({file.note})")
        lines.append(file.text.rstrip("\n"))
    lines += [f"note: {note}" for note in found.notes]
    return "\n".join(lines) if lines else f"No indexed file matches {found.pattern!r}."


def install_file_tools(
    register: Callable[[str], Callable[[Any], Any]],
    engine_for: Callable[[Context], recalld.MemoryEngine],
    call: Callable[[Callable[[], CallToolResult]], CallToolResult],
) -> None:
    """Register the file tool with ``register(title)`` (the server's read-only tools')."""

    @register("Read indexed files")
    def memory_get_files(
        ctx: Context, pattern: Pattern, max_bytes: MaxBytes = MCP_FILE_BYTES
    ) -> CallToolResult:
        """Read indexed files whole: one by path, or every file a glob matches.

        Returns each file's text as indexed, under its collection path, with the context
        lines of its collection (what the folder is). Use it when a search hit from a file
        is not enough and the whole page is needed. A glob that matches nothing answers
        with a note, not an error.
        """

        def run() -> CallToolResult:
            request = parse(GetFiles, {"pattern": pattern, "max_bytes": max_bytes})
            found = engine_for(ctx).execute(request)
            return result(describe_files(found), found)

        return call(run)
