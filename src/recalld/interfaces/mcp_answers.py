"""The MCP tools' answers: compact text the calling model reads, plus the JSON of
:mod:`recalld.serialize` as structured content, cut to what a client takes in one tool
output."""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent

from recalld.interfaces.describe import SHOWN_CHARS
from recalld.interfaces.exposure import too_large_answer
from recalld.request_limits import MAX_RESPONSE_BYTES
from recalld.serialize import to_json

MAX_OUTPUT_CHARS = 60_000
"""The most characters a tool's answer (its text and its structured content together) may
hold: about 15,000-20,000 tokens, inside Claude Code's default limit of 25,000 tokens a tool
output, so that a client never cuts an answer (or refuses it) on its own."""
LISTED = ("hits", "memories", "files")
"""The lists an answer may be shortened by, from their end."""


def _size(text: str, structured: dict[str, Any]) -> int:
    return len(text) + len(json.dumps(structured, ensure_ascii=False))


def _shorten(value: Any) -> Any:
    """``value`` with every long string (a memory's content) cut to the length a list shows."""
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return value[:SHOWN_CHARS] + " … (cut)"
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v) for v in value]
    return value


def bounded(text: str, structured: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The answer cut to :data:`MAX_OUTPUT_CHARS`, saying so: long contents first, then
    the last entries of its list, then the text's tail."""
    if _size(text, structured) <= MAX_OUTPUT_CHARS:
        return text, structured
    structured = _shorten(structured)
    listed = next((k for k in LISTED if isinstance(structured.get(k), list)), None)
    total = len(structured[listed]) if listed else 0
    while listed and structured[listed] and _size("", structured) > MAX_OUTPUT_CHARS // 2:
        structured[listed] = structured[listed][:-1]
    note = "(answer cut to stay within the tool-output limit: "
    if listed:
        note += (
            f"{len(structured[listed])} of {total} {listed} shown, long contents cut; "
            "ask for fewer, or memory_get one of them)"
        )
    else:
        note += f"texts cut at {SHOWN_CHARS:,} characters)"
    structured["note"] = note
    room = max(0, MAX_OUTPUT_CHARS - _size("", structured) - len(note) - 2)
    return f"{text[:room]}\n{note}", structured


def result(text: str, data: Any) -> CallToolResult:
    """The answer of ``data`` described by ``text``, cut as :func:`bounded` says; a tool
    error when its JSON is over the answers' cap (:data:`MAX_RESPONSE_BYTES`, as over HTTP)."""
    structured = to_json(data)
    structured = structured if isinstance(structured, dict) else {"result": structured}
    size = len(json.dumps(structured, ensure_ascii=False, separators=(",", ":")).encode())
    if size > MAX_RESPONSE_BYTES:
        return error(too_large_answer(size, MAX_RESPONSE_BYTES))
    text, structured = bounded(text, structured)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
